// The syntax tree of a parsed template: expressions and statements as Jinja2's parser builds them
// (jinja2/nodes.py), reduced to what rendering needs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace rkv::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    Const,     // value
    Name,      // name
    Tuple,     // items
    List,      // items
    Dict,      // items as key, value, key, value, ...
    GetAttr,   // items[0].name
    GetItem,   // items[0][items[1]]
    Slice,     // items: start, stop, step (null where left out)
    Call,      // items[0](items[1..], keyword, dyn_args, dyn_kwargs)
    Filter,    // items[0] | name(items[1..], keyword); items[0] null in {% filter %}
    Test,      // items[0] is [not] name(items[1..], keyword)
    Not,       // not items[0]
    Neg,       // -items[0]
    Pos,       // +items[0]
    Binary,    // items[0] op items[1]: + - * / // % ** ~
    And,       // items[0] and items[1]
    Or,        // items[0] or items[1]
    Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
    CondExpr,  // items[1] if items[0] else items[2] (items[2] null: undefined)
  };
  Kind kind = Kind::Const;
  int line = 0;
  int depth = 1;  // of this tree: the parser bounds it (kMaxExprDepth)
  Value value;
  std::string name;  // Name, GetAttr, Filter, Test, Binary's operator
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;  // Compare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr dyn_args, dyn_kwargs;
  bool negated = false;  // Test: "is not"
};

// What {% for %} and {% set %} assign to: a name, a namespace attribute or a tuple of targets.
struct Target {
  enum class Kind { Name, Attr, Tuple };
  Kind kind = Kind::Name;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Output,       // text
    Print,        // exprs[0]
    If,           // exprs[i] guards bodies[i]; else_body
    For,          // target in exprs[0] [if filter]; body; else_body; recursive
    Set,          // target = exprs[0]
    SetBlock,     // target = rendered body, through filters (exprs: Filter chains)
    Macro,        // name(params) body
    CallBlock,    // exprs[0] (a Call) with caller(params) = body
    FilterBlock,  // body through exprs[0] (a Filter chain on a null subject)
    With,         // targets[i] = exprs[i], then body
    Break,
    Continue,
    Scope,  // body rendered in place ({% generation %}, {% block %})
  };
  Kind kind = Kind::Output;
  int line = 0;
  std::string text;  // Output's text, Macro's name
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  Target target;
  std::vector<Target> targets;
  ExprPtr filter;  // For's "if"
  bool recursive = false;
  std::vector<MacroParam> params;
};

}  // namespace rkv::jinja
