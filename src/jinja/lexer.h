// Splits template text into tokens the way Jinja2's lexer does with trim_blocks and lstrip_blocks
// on: text, {{ }}, {% %} (with their - and + whitespace controls), {# #} comments (dropped) and
// {% raw %} blocks (kept as text); inside tags, names, numbers, strings and operators.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::jinja {

enum class TokenType : std::uint8_t {
  Data,
  VariableBegin,
  VariableEnd,
  BlockBegin,
  BlockEnd,
  Name,
  String,
  Integer,
  Float,
  Operator,
  End,
};

struct Token {
  TokenType type;
  std::string text;  // the data, the name, the decoded string, the operator, the number's text
  int line = 1;
  std::int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws Error(TemplateSyntaxError) on a malformed tag, string or number.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace rkv::jinja
