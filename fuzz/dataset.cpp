// Fuzzes the jsonl dataset reader (src/eval/dataset.cpp, include/rkv/eval.h) through
// load_dataset on a scratch file, with every preset and with explicit fields, then renders the
// evaluation prompt of each example. Input: one byte choosing the options, then the jsonl text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/eval.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const auto path = rkv_fuzz::scratch().write("data.jsonl", rkv_fuzz::as_text(data + 1, size - 1));
  rkv::eval::DatasetOptions options;
  static const char* const kPresets[] = {"", "math500", "aime24", "gsm8k", "MATH-500", "nope"};
  options.preset = kPresets[flags % 6];
  if (flags & 0x08) options.question_field = "question";
  if (flags & 0x10) options.answer_field = "answer";
  if (flags & 0x20) options.question_field = "id";
  options.limit = (flags >> 6);  // 0 keeps all
  try {
    const rkv::eval::Dataset d = rkv::eval::load_dataset(path, options);
    for (const auto& e : d.examples) {
      (void)rkv::eval::render_prompt(
          d.prompt_template.empty() ? rkv::eval::kDefaultPromptTemplate : d.prompt_template,
          e.question);
    }
  } catch (const rkv::Error&) {
  }
  return 0;
}
