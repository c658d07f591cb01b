// The R-KV evaluation prompt and --prompt-template files.
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "rkv/eval.h"

namespace rkv::eval {

namespace {
constexpr std::string_view kPlaceholder = "{question}";
}

std::string render_prompt(std::string_view tmpl, std::string_view question) {
  std::string out;
  out.reserve(tmpl.size() + question.size());
  std::size_t start = 0;
  for (std::size_t pos = tmpl.find(kPlaceholder); pos != std::string_view::npos;
       pos = tmpl.find(kPlaceholder, start)) {
    out.append(tmpl.substr(start, pos - start));
    out.append(question);
    start = pos + kPlaceholder.size();
  }
  out.append(tmpl.substr(start));
  return out;
}

std::string load_prompt_template(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(path.string() + ": no such prompt template file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the prompt template");
  std::ostringstream text;
  text << in.rdbuf();
  std::string tmpl = text.str();
  if (tmpl.find(kPlaceholder) == std::string::npos)
    throw Error(path.string() + ": the prompt template has no {question} placeholder");
  return tmpl;
}

}  // namespace rkv::eval
