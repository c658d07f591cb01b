// rkv grade: the math answer grader on one (prediction, gold) pair, or regrading a run's jsonl.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "rkv/eval.h"

namespace rkv::cli {
namespace {

struct GradeOptions {
  std::string pred;
  std::string gold;
  std::string file;
  std::string out;
  std::string dataset = "math500";
  bool extract = false;
  bool quiet = false;
};

eval::AnswerStyle style_of(const std::string& dataset) {
  const eval::DatasetPreset* preset = eval::find_preset(dataset);
  if (preset == nullptr)
    throw Error("--dataset: unknown dataset '" + dataset + "' (math500, aime24, gsm8k)");
  return preset->style;
}

// One line of a printed table: newlines and tabs shown as \n and \t.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c != '\r')
      out += c;
  }
  return out;
}

std::string text_of(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void regrade_file(const GradeOptions& o) {
  const eval::AnswerStyle default_style = style_of(o.dataset);
  std::ifstream in(o.file, std::ios::binary);
  if (!in) throw Error(o.file + ": cannot open the file given with --file");
  std::ofstream out;
  if (!o.out.empty()) {
    out.open(o.out, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(o.out + ": cannot write the file given with --out");
  }
  std::string line;
  std::size_t line_no = 0, total = 0, correct = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = o.file + ":" + std::to_string(line_no);
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": malformed JSON: " + e.what());
    }
    if (!obj.is_object()) throw Error(where + ": expected a JSON object");
    eval::AnswerStyle style = default_style;
    if (auto it = obj.find("dataset"); it != obj.end() && it->is_string()) {
      if (const eval::DatasetPreset* p = eval::find_preset(it->get<std::string>()))
        style = p->style;
    }
    std::string extracted;
    if (auto it = obj.find("output"); it != obj.end() && it->is_string()) {
      extracted = eval::extract_answer(it->get<std::string>(), style);
    } else if (auto ex = obj.find("extracted"); ex != obj.end() && !ex->is_null()) {
      extracted = text_of(*ex);
    } else {
      throw Error(where + ": the line has neither 'output' nor 'extracted'");
    }
    std::string gold;
    if (auto it = obj.find("gold"); it != obj.end() && !it->is_null()) {
      gold = text_of(*it);
    } else if (auto a = obj.find("answer"); a != obj.end() && !a->is_null()) {
      gold = text_of(*a);
    } else {
      throw Error(where + ": the line has neither 'gold' nor 'answer'");
    }
    if (const std::size_t h = gold.rfind("####"); h != std::string::npos) gold = gold.substr(h + 4);
    const bool ok = eval::answers_match(extracted, gold);
    ++total;
    correct += ok ? 1 : 0;
    if (!o.quiet)
      std::printf("%zu\t%s\t%s\t%s\n", line_no, ok ? "true" : "false", one_line(extracted).c_str(),
                  one_line(gold).c_str());
    if (out.is_open()) {
      obj["extracted"] = extracted;
      obj["correct"] = ok;
      out << obj.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  }
  if (out.is_open() && !out.flush()) throw Error(o.out + ": write failed");
  std::printf("graded %zu, correct %zu, accuracy %.4f\n", total, correct,
              total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0);
}

void run_grade(const GradeOptions& o, bool have_pred, bool have_gold) {
  if (!o.file.empty()) {
    if (have_pred || have_gold) throw Error("give --file, or --pred and --gold, not both");
    regrade_file(o);
    return;
  }
  if (!o.out.empty()) throw Error("--out goes with --file");
  if (!have_pred || !have_gold) throw Error("give --pred and --gold (or --file)");
  std::string pred = o.pred;
  if (o.extract) pred = eval::extract_answer(pred, style_of(o.dataset));
  std::printf("%s\n", eval::answers_match(pred, o.gold) ? "true" : "false");
}

const RegisterCommand kRegister{
    "grade", "Grade a math answer against the gold one, or regrade a run's jsonl",
    [](CLI::App& app) {
      auto o = std::make_shared<GradeOptions>();
      // expected(0, 1): "--pred=" is an empty prediction rather than a request for the next
      // argument; "--pred=-3" and "--pred -3" both give -3.
      CLI::Option* pred = add_flag_option(app, "--pred", o->pred,
                                          "The predicted answer, e.g. --pred='\\frac{1}{2}' "
                                          "(may be empty or start with '-'; use --pred=VALUE; no "
                                          "default, required without --file)")
                              ->type_name("TEXT")
                              ->expected(0, 1);
      CLI::Option* gold = add_flag_option(app, "--gold", o->gold,
                                          "The gold answer, e.g. --gold=0.5 (use --gold=VALUE; no "
                                          "default, required without --file)")
                              ->type_name("TEXT")
                              ->expected(0, 1);
      app.add_flag("--extract", o->extract,
                   "Treat --pred as a whole model output and extract its final answer first "
                   "(last \\boxed{}, then 'Final answer:', 'The answer is'; default: off)");
      add_flag_option(app, "--file", o->file,
                      "Regrade a run: a jsonl file whose lines have 'output' (re-extracted) or "
                      "'extracted', and 'gold' or 'answer' (default: none)")
          ->type_name("FILE");
      add_flag_option(app, "--out", o->out,
                      "With --file: write the lines again with 'extracted' and 'correct' set "
                      "(default: none)")
          ->type_name("FILE");
      add_flag_option(app, "--dataset", o->dataset,
                      "Extraction style: math500 or aime24 (boxed / phrase answers) or gsm8k (also "
                      "the last number); a line's own 'dataset' field wins (default: math500)")
          ->type_name("NAME");
      app.add_flag("-q,--quiet", o->quiet,
                   "With --file: print only the summary line (default: off)");
      app.footer(
          "With --pred/--gold it prints true or false. With --file it prints one line per "
          "record (line number, true/false, extracted answer, gold) and then 'graded N, "
          "correct K, accuracy A'.\nThe rules (normalisation, numeric and symbolic equality, "
          "tuples, intervals, sets, matrices, multiple choice) are in docs/EVAL.md.\n"
          "Example: rkv grade --pred='\\dfrac{1}{2}' --gold=0.5   prints  true\n");
      app.callback([o, pred, gold] { run_grade(*o, pred->count() > 0, gold->count() > 0); });
    }};

}  // namespace
}  // namespace rkv::cli
