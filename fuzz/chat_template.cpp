// Fuzzes the chat templates (src/tokenizer/chat_template.cpp, include/rkv/chat_template.h): the
// template text compiled as a Jinja chat template (make_jinja_chat_template) and rendered over
// arbitrary messages as the engine renders a request, parse_chat_template_name, prompt_opens_think,
// and render_chat of the messages for every built-in family. Input: the template text, then parts
// separated by "\n--8<--\n": role, content, role, content, ... (unknown roles are an rkv::Error).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 65);
  const std::string_view template_text = parts[0];
  try {
    (void)rkv::parse_chat_template_name(template_text);
  } catch (const rkv::Error&) {
  }
  std::vector<rkv::ChatMessage> messages;
  for (std::size_t i = 1; i + 1 < parts.size(); i += 2)
    messages.push_back({std::string(parts[i]), std::string(parts[i + 1])});
  if (parts.size() % 2 == 0) messages.push_back({"user", std::string(parts.back())});

  try {
    const rkv::ChatTemplate t =
        rkv::make_jinja_chat_template(template_text, "fuzz", std::string("<s>"), std::nullopt);
    const std::string prompt = rkv::render_chat(t, messages, true);
    (void)rkv::prompt_opens_think(prompt);
  } catch (const rkv::Error&) {
  }
  for (const auto& name : rkv::chat_template_names()) {
    const rkv::ChatTemplate t = rkv::make_chat_template(rkv::parse_chat_template_name(name));
    for (bool gen : {false, true}) {
      try {
        (void)rkv::prompt_opens_think(rkv::render_chat(t, messages, gen));
      } catch (const rkv::Error&) {
      }
    }
  }
  return 0;
}
