// rkv logits: float32 logits of the last N positions of a token sequence, as JSON.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "kv_options.h"
#include "model/model.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model;
  std::string matmul_precision;
  std::string device;  // --device
  std::string attention_precision;
  std::string ids;
  int last = 1;
  int threads = 1;
  std::string kv_dtype;
};

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  add_flag_option(app, "-m,--model", args->model,
                  "Model directory (config.json + *.safetensors) or .gguf file")
      ->required();
  add_flag_option(app, "--ids", args->ids, "Comma-separated token ids, run as one forward pass")
      ->required();
  add_flag_option(app, "--last", args->last, "Print the logits of the last N positions")
      ->check(at_least(1));
  add_kv_dtype_option(app, args->kv_dtype);
  add_precision_options(app, args->matmul_precision, args->attention_precision);
  add_device_option(app, args->device);
  add_threads_option(app, args->threads);
  app.callback([args] {
    const std::vector<int> ids = parse_int_list(args->ids, "--ids");
    if (ids.empty()) throw Error("--ids: give at least one token id");
    if (args->last > static_cast<int>(ids.size()))
      throw Error("--last " + std::to_string(args->last) + " is more than the " +
                  std::to_string(ids.size()) + " ids given");
    const std::optional<KvDtype> kv_dtype =
        args->kv_dtype.empty() ? std::nullopt : std::optional(parse_kv_dtype(args->kv_dtype));
    DeviceNeeds needs;
    needs.kv_dtype = kv_dtype;
    auto model = load_model(args->model, args->matmul_precision, args->attention_precision,
                            args->device, needs);
    const int V = model->config().vocab_size;
    if (static_cast<int>(ids.size()) > model->config().max_position_embeddings)
      throw Error(std::to_string(ids.size()) + " ids exceed the model's context of " +
                  std::to_string(model->config().max_position_embeddings));
    KvCache cache(model->cache_shape(static_cast<int>(ids.size()), 0, kv_dtype));
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < ids.size(); ++i)
      rows.push_back({&cache, ids[i], static_cast<int>(i),
                      i + static_cast<std::size_t>(args->last) >= ids.size()});
    ThreadPool pool(args->threads);
    ForwardScratch scratch;
    std::vector<float> logits(static_cast<std::size_t>(args->last) * V);
    model->forward(rows, scratch, pool, logits.data());
    nlohmann::json out;
    out["logits"] = nlohmann::json::array();
    for (int r = 0; r < args->last; ++r)
      out["logits"].push_back(std::vector<float>(logits.begin() + static_cast<long>(r) * V,
                                                 logits.begin() + static_cast<long>(r + 1) * V));
    std::printf("%s\n", out.dump().c_str());
  });
}

const RegisterCommand reg(
    "logits", "Print the float32 logits of the last N positions of a token sequence as JSON",
    setup);

}  // namespace
}  // namespace rkv::cli
