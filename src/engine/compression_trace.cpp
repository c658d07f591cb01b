#include "engine/compression_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"

namespace rkv {

namespace {
nlohmann::json summary(const std::vector<float>& v) {
  if (v.empty()) return nullptr;
  double sum = 0.0;
  for (float x : v) sum += x;
  return {{"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())},
          {"mean", sum / static_cast<double>(v.size())}};
}

// Token text is valid UTF-8 (the streaming decoder replaces what is not); replace anyway rather
// than throw, should a tokenizer ever hand back something else.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
// The checkpoint directory's name ("models/tiny/" and "models/tiny" both give "tiny").
std::string model_name(const std::filesystem::path& dir) {
  const std::filesystem::path clean = dir.lexically_normal();
  return (clean.has_filename() ? clean.filename() : clean.parent_path().filename()).string();
}
}  // namespace

CompressionTrace::CompressionTrace(Sink sink, const Tokenizer* tokenizer)
    : sink_(std::move(sink)), tokenizer_(tokenizer) {
  if (tokenizer_ != nullptr) decoder_ = std::make_unique<StreamingDecoder>(*tokenizer_);
}

CompressionTrace::CompressionTrace(const std::string& path, const Tokenizer* tokenizer)
    : CompressionTrace(Sink{}, tokenizer) {
  file_ = std::make_unique<std::ofstream>(path, std::ios::binary);
  if (!*file_) throw Error(path + ": cannot open the trace file for writing");
  sink_ = [this, path](const std::string& line) {
    *file_ << line << '\n';
    if (!*file_) throw Error(path + ": cannot write the trace file");
  };
}

CompressionTrace::~CompressionTrace() = default;

std::int64_t CompressionTrace::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

void CompressionTrace::write(const std::string& line) {
  sink_(line);
  ++lines_;
}

void CompressionTrace::begin(const PreparedRequest& request, const Model& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  const CompressionParams& p = request.request.compression;
  const ModelConfig& config = model.config();
  write(dump({{"type", "header"},
              {"format", "rkv-trace"},
              {"version", kTraceVersion},
              {"method", std::string(method_name(p.method))},
              {"budget", p.budget},
              {"buffer", p.buffer},
              {"window", p.window},
              {"layers", config.num_layers},
              {"kv_heads", config.num_kv_heads},
              {"prompt_tokens", request.prompt.size()},
              {"model", model_name(model.dir())}}));
  for (int id : request.prompt) {
    pending_ids_.push_back(id);
    pending_text_.push_back(decoder_ ? decoder_->push(id) : std::string());
  }
  flush_tokens();
}

void CompressionTrace::token(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_ids_.push_back(id);
  pending_text_.push_back(decoder_ ? decoder_->push(id) : std::string());
}

void CompressionTrace::flush_tokens() {
  if (pending_ids_.empty()) return;
  write(dump({{"type", "tokens"},
              {"start", next_position_},
              {"ids", pending_ids_},
              {"text", pending_text_}}));
  next_position_ += static_cast<std::int64_t>(pending_ids_.size());
  pending_ids_.clear();
  pending_text_.clear();
}

void CompressionTrace::record(const CompressionEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_tokens();
  const int heads = static_cast<int>(e.selection->kept.size());
  for (int h = 0; h < heads; ++h) {
    const std::int32_t* positions = e.cache->positions(e.layer, h);
    std::vector<std::int32_t> kept_positions;
    for (std::int32_t index : e.selection->kept[static_cast<std::size_t>(h)])
      kept_positions.push_back(positions[index]);
    nlohmann::json line = {{"type", "compression"},
                           {"step", e.step},
                           {"first_reader", e.first_reader},
                           {"layer", e.layer},
                           {"head", h},
                           {"method", std::string(method_name(e.params->method))},
                           {"n_before", e.n_before},
                           {"n_after", kept_positions.size()},
                           {"kept_positions", kept_positions}};
    if (e.diagnostics != nullptr && static_cast<int>(e.diagnostics->heads.size()) > h) {
      const HeadDiagnostics& d = e.diagnostics->heads[static_cast<std::size_t>(h)];
      line["importance"] = summary(d.importance);
      line["redundancy"] = summary(d.redundancy);
      line["final_score"] = summary(d.final_score);
    }
    write(dump(line));
  }
  if (file_) file_->flush();
}

void CompressionTrace::end(const Completion& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (decoder_) {
    std::string rest = decoder_->flush();
    if (!rest.empty() && !pending_text_.empty()) pending_text_.back() += rest;
  }
  flush_tokens();
  write(dump({{"type", "end"},
              {"generated_tokens", c.tokens.size()},
              {"finish_reason", c.finish_reason},
              {"compressions", c.compressions}}));
  if (file_) file_->flush();
}

}  // namespace rkv
