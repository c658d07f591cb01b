// llama.cpp as an oracle for `scripts/llamacpp-crosscheck.sh`: loads a GGUF file through
// libllama with the settings of ../shared/golden/arch (n_ctx 512, one sequence, f32 K and V
// cache, flash attention off, 2 threads, no BOS), decodes the prompt ids in one batch, then
// `steps` - 1 greedy tokens one at a time, and prints JSON: the greedy ids, each step's top-1
// minus top-2 logit margin, and the full logits of the first 4 steps.
//
// Built by the script against the llama.cpp tree it is given; never part of rkv's build.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... STEPS\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  for (char* p = argv[2]; *p != '\0';) {
    ids.push_back(static_cast<llama_token>(std::strtol(p, &p, 10)));
    if (*p == ',') ++p;
  }
  const int steps = std::atoi(argv[3]);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llama.cpp could not make a context\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::string greedy = "[", margins = "[", logits = "[";
  std::vector<llama_token> next = ids;
  char buf[40];
  for (int s = 0; s < steps; ++s) {
    if (llama_decode(ctx, llama_batch_get_one(next.data(), static_cast<int>(next.size()))) != 0) {
      std::fprintf(stderr, "llama_decode failed at step %d\n", s);
      return 1;
    }
    const float* lg = llama_get_logits_ith(ctx, -1);
    int best = 0;
    float top1 = lg[0], top2 = -1e30f;
    for (int i = 1; i < n_vocab; ++i) {
      if (lg[i] > top1) {
        top2 = top1;
        top1 = lg[i];
        best = i;
      } else if (lg[i] > top2) {
        top2 = lg[i];
      }
    }
    std::snprintf(buf, sizeof buf, "%s%d", s ? "," : "", best);
    greedy += buf;
    std::snprintf(buf, sizeof buf, "%s%.6g", s ? "," : "", top1 - top2);
    margins += buf;
    if (s < 4) {
      logits += s ? ",[" : "[";
      for (int i = 0; i < n_vocab; ++i) {
        std::snprintf(buf, sizeof buf, "%s%.9g", i ? "," : "", lg[i]);
        logits += buf;
      }
      logits += "]";
    }
    next.assign(1, best);
  }
  std::printf("{\"greedy_ids\": %s], \"margins\": %s], \"logits\": %s]}\n", greedy.c_str(),
              margins.c_str(), logits.c_str());
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
