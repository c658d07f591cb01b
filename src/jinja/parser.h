// Builds the syntax tree from tokens with Jinja2's grammar (jinja2/parser.py): the statements of
// the core language, the loopcontrols extension ({% break %}, {% continue %}) and transformers'
// {% generation %}. Throws Error(TemplateSyntaxError).
#pragma once

#include <string_view>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace rkv::jinja {

// How deeply expressions and blocks may nest before parsing stops with an error.
inline constexpr int kMaxParseDepth = 200;
// How deep one expression's tree may be (a + b + c + ... builds depth without nesting).
inline constexpr int kMaxExprDepth = 300;

Body parse_template(std::string_view source);

}  // namespace rkv::jinja
