// llama.cpp's tokenizer as an oracle for `scripts/llamacpp-crosscheck.sh`: loads a GGUF file's
// vocabulary through libllama and prints, for each input line, the ids of llama_tokenize (BOS
// added where the vocabulary says so, special tokens parsed) as a JSON list. An input line is one
// text with backslash escapes: \\ \n \t \r.
//
// Built by the script against the llama.cpp tree it is given; never part of rkv's build.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf < texts\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string text;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        const char c = line[++i];
        text += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
      } else {
        text += line[i];
      }
    }
    std::vector<llama_token> ids(text.size() + 8);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), ids.data(),
                                 static_cast<int>(ids.size()), true, true);
    std::printf("[");
    for (int i = 0; i < n; ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("]\n");
  }
  llama_model_free(model);
  return 0;
}
