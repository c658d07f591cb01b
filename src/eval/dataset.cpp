// Evaluation datasets: jsonl files with a preset (math500, aime24, gsm8k) or explicit fields.
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/text.h"
#include "rkv/eval.h"

namespace rkv::eval {
namespace {

std::string field_names(const nlohmann::json& obj) {
  std::string names;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!names.empty()) names += ", ";
    names += it.key();
  }
  return names.empty() ? "none" : names;
}

// The text of a field: strings as they are, numbers as their JSON text.
std::string text_field(const nlohmann::json& obj, const std::string& field,
                       const std::string& where) {
  auto it = obj.find(field);
  if (it == obj.end())
    throw Error(where + ": no field '" + field + "' (the record has: " + field_names(obj) + ")");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number()) return it->dump();
  throw Error(where + ": field '" + field + "' is " + it->type_name() + ", expected a string");
}

// GSM8K: "...reasoning...\n#### 72" -> "72".
std::string after_hashes(const std::string& answer, const std::string& where) {
  const std::size_t pos = answer.rfind("####");
  if (pos == std::string::npos)
    throw Error(where + ": the answer has no '####' final-answer marker");
  return std::string(detail::trim(std::string_view(answer).substr(pos + 4)));
}

}  // namespace

const std::vector<DatasetPreset>& dataset_presets() {
  static const std::vector<DatasetPreset> presets = {
      {"math500", "problem", "answer", false, AnswerStyle::kMath, 8192},
      {"aime24", "problem", "answer", false, AnswerStyle::kMath, 16384},
      {"gsm8k", "question", "answer", true, AnswerStyle::kNumber, 8192},
      // The tiny reasoning model's held-out set (data/chains_test.jsonl, tools/tiny/task.py):
      // the model was trained on the bare program, so the prompt is the question alone.
      {"chains", "problem", "answer", false, AnswerStyle::kMath, 1024, "{question}"},
      // The second tiny model's held-out set (data/redundant_test.jsonl, task.py --family
      // redundant): the same layout, with redundant thoughts in the chain.
      {"redundant", "problem", "answer", false, AnswerStyle::kMath, 1024, "{question}"},
  };
  return presets;
}

const DatasetPreset* find_preset(std::string_view name) {
  std::string n = detail::lower(detail::trim(name));
  if (n == "math-500" || n == "math_500") n = "math500";
  if (n == "aime" || n == "aime2024" || n == "aime-2024" || n == "aime_2024") n = "aime24";
  if (n == "gsm-8k") n = "gsm8k";
  if (n == "chains_test" || n == "tiny") n = "chains";
  if (n == "redundant_test" || n == "tiny-redundant") n = "redundant";
  for (const DatasetPreset& p : dataset_presets())
    if (p.name == n) return &p;
  return nullptr;
}

int default_max_length(std::string_view preset) {
  const DatasetPreset* p = find_preset(preset);
  return p != nullptr ? p->max_length : 8192;
}

Dataset load_dataset(const std::filesystem::path& path, const DatasetOptions& options) {
  const DatasetPreset* preset = nullptr;
  if (!options.preset.empty()) {
    preset = find_preset(options.preset);
    if (preset == nullptr) {
      std::string names;
      for (const DatasetPreset& p : dataset_presets())
        names += (names.empty() ? "" : ", ") + std::string(p.name);
      throw Error("unknown dataset preset '" + options.preset + "' (known: " + names + ")");
    }
  }
  Dataset data;
  data.name = preset != nullptr ? std::string(preset->name) : path.stem().string();
  data.style = preset != nullptr ? preset->style : AnswerStyle::kMath;
  data.max_length = preset != nullptr ? preset->max_length : 8192;
  if (preset != nullptr) data.prompt_template = std::string(preset->prompt_template);
  const std::string question_field = !options.question_field.empty() ? options.question_field
                                     : preset != nullptr ? std::string(preset->question_field)
                                                         : "problem";
  const std::string answer_field = !options.answer_field.empty() ? options.answer_field
                                   : preset != nullptr           ? std::string(preset->answer_field)
                                                                 : "answer";
  const bool hashes = preset != nullptr && preset->answer_after_hashes &&
                      answer_field == std::string(preset->answer_field);

  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(path.string() + ": no such dataset file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the dataset file");

  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (options.limit > 0 && data.examples.size() >= options.limit) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (detail::trim(line).empty()) continue;
    const std::string where = path.string() + ":" + std::to_string(line_no);
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": malformed JSON: " + e.what());
    }
    if (!obj.is_object())
      throw Error(where + ": expected a JSON object, got " + std::string(obj.type_name()));
    Example ex;
    ex.index = data.examples.size();
    ex.line = line_no;
    ex.question = text_field(obj, question_field, where);
    ex.answer = text_field(obj, answer_field, where);
    if (hashes) ex.answer = after_hashes(ex.answer, where);
    ex.id = std::to_string(ex.index);
    for (const char* key : {"unique_id", "id"}) {
      auto it = obj.find(key);
      if (it == obj.end()) continue;
      ex.id = it->is_string() ? it->get<std::string>() : it->dump();
      break;
    }
    data.examples.push_back(std::move(ex));
  }
  if (in.bad()) throw Error(path.string() + ": read error");
  return data;
}

}  // namespace rkv::eval
