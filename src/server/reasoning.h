// Splits a reasoning model's output into its chain of thought and its answer at the think
// markers, as text streams in (vLLM's and llama.cpp's `reasoning_content`): everything inside
// <think> ... </think> is reasoning, the rest is content. A generation that starts inside the
// block (the DeepSeek-R1 template opens it in the prompt) is reasoning until </think>; one that
// opens it itself (Qwen3) enters it at a leading <think>. Markers split across pieces of text
// are recognised: a piece that may be the start of a marker is held back until it is known.
#pragma once

#include <string>
#include <string_view>

namespace rkv::server {

class ReasoningSplitter {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };

  explicit ReasoningSplitter(bool starts_in_reasoning);
  Delta push(std::string_view text);
  Delta finish();  // what is held back, at the end of the generation

 private:
  enum class Phase { start, reasoning_start, reasoning, after_reasoning, content };
  Delta drain(bool final);
  Phase phase_;
  std::string pending_;
};

}  // namespace rkv::server
