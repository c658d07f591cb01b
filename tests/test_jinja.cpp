// The Jinja interpreter (src/jinja): every case of ../shared/golden/chat_templates rendered byte
// for byte (or failing as Jinja2 fails), and hand-worked cases of the language, Python's
// semantics and the resource bounds.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "jinja/template.h"
#include "test_util.h"

namespace {

using rkv::jinja::ErrorKind;
using rkv::jinja::RenderOptions;
using rkv::jinja::Template;
using rkv::jinja::Value;
using ojson = nlohmann::ordered_json;

using rkv::test::read_text;

RenderOptions golden_options() {
  RenderOptions o;
  o.now = rkv::jinja::parse_date("2026-01-15");
  return o;
}

// ---- the golden corpus -------------------------------------------------------------------------

std::filesystem::path corpus_dir() {
  const auto shared = rkv::test::shared_dir();
  if (shared.empty()) return {};
  const auto dir = shared / "golden" / "chat_templates";
  return std::filesystem::exists(dir / "cases.jsonl") ? dir : std::filesystem::path();
}

struct GoldenCase {
  std::string id;
  ojson json;
};

std::vector<GoldenCase> load_cases() {
  std::vector<GoldenCase> cases;
  const auto dir = corpus_dir();
  if (dir.empty()) return cases;
  std::ifstream in(dir / "cases.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ojson j = ojson::parse(line);
    cases.push_back({j.at("id").get<std::string>(), std::move(j)});
  }
  return cases;
}

const std::vector<GoldenCase>& cases() {
  static const std::vector<GoldenCase> all = load_cases();
  return all;
}

// The variables of a case, bound exactly as the corpus README says.
std::vector<std::pair<std::string, Value>> bind_case(const ojson& c,
                                                     const std::filesystem::path& dir) {
  const ojson conv =
      ojson::parse(read_text(dir / "conversations" / c.at("conversation").get<std::string>()));
  std::vector<std::pair<std::string, Value>> vars;
  vars.emplace_back("messages", rkv::jinja::from_json(conv.at("messages")));
  vars.emplace_back(
      "tools", conv.contains("tools") ? rkv::jinja::from_json(conv.at("tools")) : Value::none());
  vars.emplace_back("documents", conv.contains("documents")
                                     ? rkv::jinja::from_json(conv.at("documents"))
                                     : Value::none());
  vars.emplace_back("add_generation_prompt",
                    Value::boolean(c.at("add_generation_prompt").get<bool>()));
  for (const char* token : {"bos_token", "eos_token"}) {
    if (c.contains(token) && !c.at(token).is_null())
      vars.emplace_back(token, Value::str(c.at(token).get<std::string>()));
  }
  for (const auto& [k, v] : c.at("extra").items()) {
    bool replaced = false;
    for (auto& [name, value] : vars) {
      if (name == k) {
        value = rkv::jinja::from_json(v);
        replaced = true;
      }
    }
    if (!replaced) vars.emplace_back(k, rkv::jinja::from_json(v));
  }
  return vars;
}

class JinjaGolden : public testing::TestWithParam<std::size_t> {};

TEST_P(JinjaGolden, Case) {
  const auto dir = corpus_dir();
  if (dir.empty())
    GTEST_SKIP() << "../shared/golden/chat_templates is absent (set RKV_SHARED_DIR): the golden "
                    "chat-template cases cannot run";
  if (GetParam() >= cases().size()) GTEST_SKIP() << "no case at this index";
  const GoldenCase& gc = cases()[GetParam()];
  const ojson& c = gc.json;
  SCOPED_TRACE(gc.id);
  const std::string source = read_text(dir / "templates" / c.at("template").get<std::string>());
  const auto vars = bind_case(c, dir);
  if (c.contains("expected")) {
    std::string got;
    try {
      got = Template::compile(source).render(vars, golden_options());
    } catch (const rkv::jinja::Error& e) {
      FAIL() << gc.id << ": " << rkv::jinja::error_kind_name(e.kind()) << ": " << e.what();
    }
    EXPECT_EQ(got, c.at("expected").get<std::string>()) << gc.id;
    return;
  }
  const std::string want_type = c.at("error_type").get<std::string>();
  try {
    const std::string got = Template::compile(source).render(vars, golden_options());
    FAIL() << gc.id << ": rendered instead of failing with " << want_type << ":\n" << got;
  } catch (const rkv::jinja::Error& e) {
    EXPECT_EQ(rkv::jinja::error_kind_name(e.kind()), want_type) << gc.id << ": " << e.what();
    if (want_type == "TemplateError") {
      EXPECT_EQ(std::string(e.what()), c.at("error").get<std::string>());
    }
  }
}

// One test per case; the corpus has 1,022 (the count is checked below).
constexpr std::size_t kGoldenCases = 1022;
INSTANTIATE_TEST_SUITE_P(ChatTemplates, JinjaGolden, testing::Range<std::size_t>(0, kGoldenCases),
                         [](const testing::TestParamInfo<std::size_t>& param_info) {
                           return "case" + std::to_string(param_info.param);
                         });

TEST(JinjaGoldenCorpus, HasAllCases) {
  if (corpus_dir().empty()) GTEST_SKIP() << "../shared/golden/chat_templates is absent";
  EXPECT_EQ(cases().size(), kGoldenCases);
}

// ---- hand-worked cases -------------------------------------------------------------------------

std::string render(const std::string& source, const std::string& vars_json = "{}") {
  return Template::compile(source).render(ojson::parse(vars_json), golden_options());
}

ErrorKind render_error(const std::string& source, const std::string& vars_json = "{}",
                       std::string* message = nullptr, RenderOptions options = golden_options()) {
  try {
    Template::compile(source).render(ojson::parse(vars_json), options);
  } catch (const rkv::jinja::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "rendered without error: " << source;
  return ErrorKind::LimitExceeded;
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("a\n    {% if true %}\n  b\n    {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a  {%+ if true %}b{% endif %}"), "a  b");
  EXPECT_EQ(render("x {# comment #}\ny"), "x y");
  EXPECT_EQ(render("{{ 'v' }}\nnext"), "v\nnext");  // no trim after }}
  EXPECT_EQ(render("line\n"), "line");              // one trailing newline dropped
  EXPECT_EQ(render("line\n\n"), "line\n");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(Jinja, LoopVariables) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(
      render("{% for x in 'abc' %}{{ loop.previtem is defined }}{{ loop.nextitem }};{% endfor %}"),
      "Falseb;Truec;True;");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}"
                   "{% if x == 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "15");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}"),
            "a=1,b=2,");
  EXPECT_EQ(render("{% for x in [1,2] %}{{ loop.cycle('o', 'e') }}{% endfor %}"), "oe");
  // A set inside a loop body is gone at the next iteration and after the loop.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}|{% "
                   "endfor %}{{ x }}"),
            "12|12|12|1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% for x in [[1, [2]], [3]] recursive %}{% if x is iterable %}({{ loop(x) }})"
                   "{% else %}{{ x }}{% endif %}{% endfor %}"),
            "(1(2))(3)");
}

TEST(Jinja, ReprAndStr) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.5, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ (1,) }}{{ () }}{{ 1e20 }}{{ 0.1 + 0.2 }}{{ 1e-5 }}{{ 10 / 4 }}{{ 4 / 2 }}"),
            "(1,)()1e+200.300000000000000041e-052.52.0");
  EXPECT_EQ(render("{{ ['a\\nb', 'x\\\\y', '\\u200d'] }}"), "['a\\nb', 'x\\\\y', '\\u200d']");
  EXPECT_EQ(render("{{ undefined_name }}|{{ none }}"), "|None");
}

TEST(Jinja, Slicing) {
  EXPECT_EQ(render("{{ 'héllo'[1:3] }}|{{ 'hello'[::-1] }}|{{ [1,2,3,4][-2:] }}|{{ 'abc'[5:] }}"),
            "él|olleh|[3, 4]|");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ [1,2,3][::2] }}"), "é5[1, 3]");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 'x']}|tojson }}"), "{\"b\": 1, \"a\": [1, \"x\"]}");
  EXPECT_EQ(render("{{ {'a': 'é'}|tojson(indent=2) }}"), "{\n  \"a\": \"é\"\n}");
  EXPECT_EQ(render("{{ 'é'|tojson(true) }}"), "\"\\u00e9\"");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}"),
            "{\"a\":2,\"b\":1}");
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'a,b'.split(',')|join('-') }}|{{ 'Hi'|upper }}|{{ "
                   "none|default('d') }}|"
                   "{{ undefined_name|default('d') }}"),
            "x|a-b|HI|None|d");
  EXPECT_EQ(render("{{ [{'n': 'b'}, {'n': 'a'}]|map(attribute='n')|sort|join }}"), "ab");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'a')|list|length }}"),
            "1");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('even')|list }}{{ [1, 2, 1]|unique|list }}"),
            "[2, 4][1, 2]");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc'|indent(2) }}"), "a\n  b\n\n  c");
  EXPECT_EQ(render("{{ {'b': 2, 'a': 1}|dictsort }}"), "[('a', 1), ('b', 2)]");
  EXPECT_EQ(
      render(
          "{{ '3'|int + 1 }}{{ 'x'|int }}{{ '2.5'|float }}{{ 2.5|round }}{{ 3.14159|round(2) }}"),
      "402.52.03.14");
  EXPECT_EQ(render("{{ 'hello world'|title }}{{ 'hello'|capitalize }}{{ [3,1,2]|max }}"),
            "Hello WorldHello3");
  EXPECT_EQ(render("{{ '%s-%05.1f-%d' % ('a', 3.14159, 7) }}"), "a-003.1-7");
  EXPECT_EQ(render("{{ '{}:{:>4}'.format('a', 'b') }}"), "a:   b");
}

TEST(Jinja, PythonMethods) {
  EXPECT_EQ(render("{{ ' a b '.split() }}{{ 'a,b,,c'.split(',', 1) }}{{ 'a.b.c'.rsplit('.', 1) }}"),
            "['a', 'b']['a', 'b,,c']['a.b', 'c']");
  EXPECT_EQ(render("{{ 'xxhixx'.strip('x') }}{{ 'Hello'.startswith(('He', 'x')) }}{{ "
                   "'abc'.endswith('bc') }}"),
            "hiTrueTrue");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }}{{ 'héllo'.find('l') }}{{ 'a-b'.title() }}"),
            "bba2A-B");
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('z', 5) }}{{ {'a': 1}.keys()|list }}"),
            "15['a']");
}

TEST(Jinja, MacrosAndCalls) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"),
            "1B12");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"),
            "2");
  EXPECT_EQ(render("{% set s %}a{{ 1 }}b{% endset %}{{ s }}"), "a1b");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(Jinja, Errors) {
  std::string message;
  EXPECT_EQ(render_error("{{ raise_exception('nope') }}", "{}", &message),
            ErrorKind::TemplateError);
  EXPECT_EQ(message, "nope");
  EXPECT_EQ(render_error("{{ [].append(1) }}", "{}", &message), ErrorKind::SecurityError);
  EXPECT_EQ(message, "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{{ {}.update({}) }}"), ErrorKind::SecurityError);
  EXPECT_EQ(render_error("{{ 'a' + [] }}", "{}", &message), ErrorKind::TypeError);
  EXPECT_EQ(message, "can only concatenate str (not \"list\") to str");
  EXPECT_EQ(render_error("{% for x in none %}{% endfor %}"), ErrorKind::TypeError);
  EXPECT_EQ(render_error("{{ u.x }}", "{}", &message), ErrorKind::UndefinedError);
  EXPECT_EQ(message, "'u' is undefined");
  EXPECT_EQ(render_error("{{ x|from_json }}"), ErrorKind::TemplateRuntimeError);
  EXPECT_EQ(render_error("{{ 'a'.items() }}"), ErrorKind::UndefinedError);
  EXPECT_EQ(render_error("{% if %}"), ErrorKind::TemplateSyntaxError);
  EXPECT_EQ(render_error("{{ 1 + }}"), ErrorKind::TemplateSyntaxError);
  EXPECT_EQ(render_error("{% for x in y %}"), ErrorKind::TemplateSyntaxError);
  EXPECT_EQ(render_error("{% set x.a = 1 %}"), ErrorKind::TemplateRuntimeError);
  EXPECT_EQ(render("{{ none.attr }}|{{ {}['k'] }}|{{ [1][5] }}"), "||");
  EXPECT_EQ(render("{{ [].append is defined }}"), "False");
}

TEST(Jinja, StrftimeNowUsesTheInjectedClock) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M %A %d %B') }}"),
            "2026-01-15 12:00 Thursday 15 January");
  EXPECT_FALSE(rkv::jinja::parse_date("2026-02-30").has_value());
  EXPECT_FALSE(rkv::jinja::parse_date("yesterday").has_value());
}

TEST(Jinja, ResourceLimits) {
  RenderOptions small = golden_options();
  small.max_work = 100000;
  small.max_output_bytes = 1 << 16;
  // An endless-looking loop stops at the work bound.
  EXPECT_EQ(render_error(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                "{}", nullptr, small),
            ErrorKind::LimitExceeded);
  // Output and string growth stop at the size bound.
  EXPECT_EQ(render_error("{{ 'x' * 1000000 }}", "{}", nullptr, small), ErrorKind::LimitExceeded);
  EXPECT_EQ(
      render_error(
          "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
          "{% endfor %}",
          "{}", nullptr, small),
      ErrorKind::LimitExceeded);
  // A list built by repetition is bounded by the same size (16 bytes an item here).
  EXPECT_EQ(render_error("{{ ([0] * 100000)|length }}", "{}", nullptr, small),
            ErrorKind::LimitExceeded);
  EXPECT_EQ(render("{{ ([0] * 100000)|length }}"), "100000");
  // range() is bounded as in Jinja2's sandbox.
  EXPECT_EQ(render_error("{{ range(1000000)|length }}"), ErrorKind::LimitExceeded);
  // Unbounded macro recursion stops at the call depth.
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            ErrorKind::LimitExceeded);
  // Deep nesting in the source is a syntax error, not a stack overflow.
  EXPECT_EQ(render_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
            ErrorKind::TemplateSyntaxError);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_EQ(render_error(chain + " }}"), ErrorKind::TemplateSyntaxError);
  // Lists nested through a namespace stop at the value depth.
  EXPECT_EQ(
      render_error("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}"
                   "{% endfor %}"),
      ErrorKind::LimitExceeded);
  // A namespace that holds itself neither leaks nor loops.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}ok"), "ok");
}

}  // namespace

// ---- rkv chat-template -------------------------------------------------------------------------

namespace {

std::string quote(const std::filesystem::path& p) {
  return "'" + p.string() + "'";
}

TEST(JinjaCli, RendersExactlyWithEveryBinding) {
  rkv::test::TempDir dir("jinja-cli");
  const auto tmpl = dir.write(
      "t.jinja",
      "{{ bos_token is defined }}|{{ eos_token }}|{% for m in messages %}{{ m.role }}:{{ m.content "
      "}};"
      "{% endfor %}{{ tools|tojson }}|{{ documents }}|{{ add_generation_prompt }}|{{ flavour }}|"
      "{{ strftime_now('%d %b %Y') }}\n\n");
  const auto messages = dir.write("m.json", R"([{"role": "user", "content": "hé"}])");
  const auto tools = dir.write("t.json", R"([{"name": "a"}, {"name": "b"}])");
  std::string out;
  const std::string base = rkv::test::rkv_binary() + " chat-template --template " + quote(tmpl) +
                           " --messages " + quote(messages);
  ASSERT_EQ(
      rkv::test::run_command(base + " --tools " + quote(tools) +
                                 " --add-generation-prompt --eos-token '</s>' --kwargs "
                                 "'{\"flavour\": \"x\", \"eos_token\": \"E\"}' --date 2026-01-15",
                             out),
      0);
  // One trailing newline of the template is dropped (Jinja2's keep_trailing_newline=False);
  // nothing is added.
  EXPECT_EQ(out,
            "False|E|user:hé;[{\"name\": \"a\"}, {\"name\": \"b\"}]|None|True|x|15 Jan 2026\n");
  ASSERT_EQ(rkv::test::run_command(base + " --date 2026-01-15", out), 0);
  EXPECT_EQ(out, "False||user:hé;null|None|False||15 Jan 2026\n");
}

TEST(JinjaCli, TemplateErrorsGoToStderrWithStatusOne) {
  rkv::test::TempDir dir("jinja-cli");
  const auto tmpl =
      dir.write("t.jinja", "before{{ raise_exception('System role not supported') }}");
  const auto messages = dir.write("m.json", "[]");
  std::string out;
  const std::string cmd = rkv::test::rkv_binary() + " chat-template --template " + quote(tmpl) +
                          " --messages " + quote(messages);
  EXPECT_EQ(rkv::test::run_command(cmd + " 2>/dev/null", out), 1);
  EXPECT_EQ(out, "");
  EXPECT_EQ(rkv::test::run_command(cmd + " 2>&1 >/dev/null", out), 1);
  EXPECT_NE(out.find("TemplateError: System role not supported"), std::string::npos) << out;
  EXPECT_EQ(rkv::test::run_command(cmd + " --date 2026-13-01 2>/dev/null", out), 1);
  EXPECT_EQ(rkv::test::run_command(cmd + " --kwargs '[1]' 2>/dev/null", out), 1);
}

TEST(JinjaCli, ReadsTheModelsOwnTemplate) {
  rkv::test::TempDir dir("jinja-cli");
  const auto messages = dir.write("m.json", R"([{"role": "user", "content": "hi"}])");
  std::filesystem::create_directories(dir.path() / "listed");
  dir.write("listed/tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D{{ messages[0].content }}"}]})");
  std::filesystem::create_directories(dir.path() / "file");
  dir.write("file/tokenizer_config.json", R"({"bos_token": "<s>"})");
  dir.write("file/chat_template.jinja", "F{{ messages|length }}");
  std::filesystem::create_directories(dir.path() / "none");
  std::string out;
  const std::string tail = " --messages " + quote(messages);
  ASSERT_EQ(rkv::test::run_command(rkv::test::rkv_binary() + " chat-template -m " +
                                       quote(dir.path() / "listed") + tail,
                                   out),
            0);
  EXPECT_EQ(out, "Dhi");
  ASSERT_EQ(
      rkv::test::run_command(
          rkv::test::rkv_binary() + " chat-template -m " + quote(dir.path() / "file") + tail, out),
      0);
  EXPECT_EQ(out, "F1");
  EXPECT_EQ(rkv::test::run_command(rkv::test::rkv_binary() + " chat-template -m " +
                                       quote(dir.path() / "none") + tail + " 2>/dev/null",
                                   out),
            1);
}

}  // namespace
