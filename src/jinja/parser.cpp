// Jinja2's recursive-descent parser (see parser.h).
#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>

namespace rkv::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != TokenType::End) fail_here("unexpected tag");
    return body;
  }

 private:
  // ---- token stream ----------------------------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const {
    return cur().type == TokenType::Operator && cur().text == op;
  }
  bool is_name(std::string_view name) const {
    return cur().type == TokenType::Name && cur().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data:
        return "template data";
      case TokenType::VariableBegin:
        return "begin of print statement";
      case TokenType::VariableEnd:
        return "end of print statement";
      case TokenType::BlockBegin:
        return "begin of statement block";
      case TokenType::BlockEnd:
        return "end of statement block";
      case TokenType::Name:
        return "'" + t.text + "'";
      case TokenType::String:
        return "string";
      case TokenType::Integer:
        return "integer";
      case TokenType::Float:
        return "float";
      case TokenType::Operator:
        return "'" + t.text + "'";
      case TokenType::End:
        return "end of template";
    }
    return "token";
  }
  [[noreturn]] void fail_here(const std::string& message) const {
    fail(ErrorKind::TemplateSyntaxError,
         message + " (got " + describe(cur()) + ", line " + std::to_string(cur().line) + ")");
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here("expected '" + std::string(op) + "'");
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail_here("expected '" + std::string(name) + "'");
  }
  std::string expect_any_name() {
    if (cur().type != TokenType::Name) fail_here("expected a name");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail_here("expected end of statement block");
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxParseDepth)
        fail(ErrorKind::TemplateSyntaxError,
             "the template nests more than " + std::to_string(kMaxParseDepth) +
                 " levels deep (line " + std::to_string(parser.cur().line) + ")");
    }
    ~DepthGuard() { --parser.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    Parser& parser;
  };

  // Records the depth of e's tree, refusing one deeper than kMaxExprDepth.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    for (const auto& c : e->items)
      if (c) d = std::max(d, c->depth);
    for (const auto& [k, c] : e->keyword) d = std::max(d, c->depth);
    if (e->dyn_args) d = std::max(d, e->dyn_args->depth);
    if (e->dyn_kwargs) d = std::max(d, e->dyn_kwargs->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth)
      fail(ErrorKind::TemplateSyntaxError,
           "an expression nests more than " + std::to_string(kMaxExprDepth) +
               " levels deep (line " + std::to_string(e->line) + ")");
    return e;
  }

  ExprPtr make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = cur().line;
    return e;
  }

  // ---- statements ------------------------------------------------------------------------------
  bool at_end_tag(std::initializer_list<std::string_view> ends) const {
    if (cur().type != TokenType::Name) return false;
    for (std::string_view e : ends)
      if (cur().text == e) return true;
    return false;
  }

  Body subparse(std::initializer_list<std::string_view> ends) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == TokenType::End) return body;
      if (t.type == TokenType::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::VariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Print;
        s->line = cur().line;
        s->exprs.push_back(parse_tuple(true, {}, false, false));
        if (cur().type != TokenType::VariableEnd) fail_here("expected end of print statement");
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::BlockBegin) {
        next();
        if (ends.size() > 0 && at_end_tag(ends)) return body;
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail_here("unexpected token");
      }
    }
  }

  // Parses up to one of `ends` (left as the current token) after the tag's own end.
  Body statements(std::initializer_list<std::string_view> ends, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(ends);
    if (cur().type == TokenType::End) {
      std::string expected;
      for (std::string_view e : ends)
        expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
      fail_here("unexpected end of template, expected " + expected);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr make_stmt(Stmt::Kind kind) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = cur().line;
    return s;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::Name) fail_here("tag name expected");
    const std::string tag = cur().text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "print") {
      auto s = make_stmt(Stmt::Kind::Print);
      next();
      auto t = make(Expr::Kind::Tuple);
      while (cur().type != TokenType::BlockEnd) {
        if (!t->items.empty()) expect_op(",");
        t->items.push_back(parse_expression(true));
      }
      // {% print a, b %} prints each expression in turn.
      for (auto& e : t->items) {
        auto p = std::make_unique<Stmt>();
        p->kind = Stmt::Kind::Print;
        p->line = s->line;
        p->exprs.push_back(std::move(e));
        s->body.push_back(std::move(p));
      }
      s->kind = Stmt::Kind::Scope;
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_here("'" + tag + "' outside of a loop");
      auto s = make_stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue);
      next();
      return s;
    }
    if (tag == "generation") {
      auto s = make_stmt(Stmt::Kind::Scope);
      next();
      s->body = statements({"endgeneration"}, true);
      return s;
    }
    if (tag == "block") {
      auto s = make_stmt(Stmt::Kind::Scope);
      next();
      const std::string name = expect_any_name();
      skip_name("scoped");
      skip_name("required");
      s->body = statements({"endblock"}, true);
      if (cur().type == TokenType::Name) {
        if (cur().text != name) fail_here("mismatching name of block '" + name + "'");
        next();
      }
      return s;
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from")
      fail_here("'" + tag + "' needs a template loader, which chat templates do not have");
    fail_here("Encountered unknown tag '" + tag + "'");
  }

  StmtPtr parse_for() {
    auto s = make_stmt(Stmt::Kind::For);
    next();
    s->target = parse_assign_target(true, false, {"in"});
    expect_name("in");
    s->exprs.push_back(parse_tuple(false, {"recursive"}, false, false));
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = statements({"endfor", "else"}, false);
    --loop_depth_;
    const bool has_else = is_name("else");
    next();
    if (has_else) s->else_body = statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = make_stmt(Stmt::Kind::If);
    next();
    for (;;) {
      s->exprs.push_back(parse_tuple(false, {}, false, false));
      s->bodies.push_back(statements({"elif", "else", "endif"}, false));
      const std::string which = cur().text;
      next();
      if (which == "elif") continue;
      if (which == "else") s->else_body = statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    auto s = make_stmt(Stmt::Kind::Set);
    next();
    s->target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      s->exprs.push_back(parse_tuple(true, {}, false, false));
      return s;
    }
    s->kind = Stmt::Kind::SetBlock;
    if (is_op("|")) s->exprs.push_back(parse_filter(nullptr, false));
    s->body = statements({"endset"}, true);
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_any_name();
      if (skip_op("="))
        p.default_value = parse_expression(true);
      else if (!s.params.empty() && s.params.back().default_value)
        fail_here("non-default argument follows default argument");
      s.params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(Stmt::Kind::Macro);
    next();
    s->text = expect_any_name();
    parse_signature(*s);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = statements({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(Stmt::Kind::CallBlock);
    next();
    if (is_op("(")) parse_signature(*s);
    auto call = parse_expression(true);
    if (call->kind != Expr::Kind::Call) fail_here("expected call");
    s->exprs.push_back(std::move(call));
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = statements({"endcall"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(Stmt::Kind::FilterBlock);
    next();
    s->exprs.push_back(parse_filter(nullptr, true));
    s->body = statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(Stmt::Kind::With);
    next();
    while (cur().type != TokenType::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(true, false, {}));
      expect_op("=");
      s->exprs.push_back(parse_expression(true));
    }
    s->body = statements({"endwith"}, true);
    return s;
  }

  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<std::string_view> extra_end) {
    if (with_namespace && cur().type == TokenType::Name && look().type == TokenType::Operator &&
        look().text == ".") {
      Target t;
      t.kind = Target::Kind::Attr;
      t.name = expect_any_name();
      next();
      t.attr = expect_any_name();
      return t;
    }
    ExprPtr e = with_tuple ? parse_tuple_simplified(extra_end) : parse_primary();
    return to_target(*e);
  }

  Target to_target(const Expr& e) {
    Target t;
    if (e.kind == Expr::Kind::Name) {
      t.name = e.name;
      return t;
    }
    if (e.kind == Expr::Kind::Tuple) {
      t.kind = Target::Kind::Tuple;
      for (const auto& item : e.items) t.items.push_back(to_target(*item));
      return t;
    }
    fail_here("can't assign to this expression");
  }

  // ---- expressions -----------------------------------------------------------------------------
  bool tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (cur().type == TokenType::VariableEnd || cur().type == TokenType::BlockEnd ||
        cur().type == TokenType::End || is_op(")"))
      return true;
    return at_end_tag(extra_end);
  }

  ExprPtr parse_tuple_simplified(std::initializer_list<std::string_view> extra_end) {
    auto t = make(Expr::Kind::Tuple);
    bool is_tuple = false;
    for (;;) {
      if (!t->items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      t->items.push_back(parse_primary());
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!t->items.empty()) return std::move(t->items[0]);
      fail_here("Expected an expression");
    }
    return t;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses, bool /*unused*/) {
    auto t = make(Expr::Kind::Tuple);
    bool is_tuple = false;
    for (;;) {
      if (!t->items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      t->items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!t->items.empty()) return std::move(t->items[0]);
      if (!explicit_parentheses) fail_here("Expected an expression");
    }
    return seal(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      auto c = make(Expr::Kind::CondExpr);
      next();
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) {
        DepthGuard guard(*this);
        expr3 = parse_condexpr();
      }
      c->items.push_back(std::move(expr2));
      c->items.push_back(std::move(expr1));
      c->items.push_back(std::move(expr3));
      expr1 = seal(std::move(c));
    }
    return expr1;
  }

  ExprPtr binary(Expr::Kind kind, ExprPtr left, ExprPtr right, std::string op = {}) {
    auto e = make(kind);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(Expr::Kind::Or, std::move(left), parse_and());
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(Expr::Kind::And, std::move(left), parse_not());
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(Expr::Kind::Not);
      next();
      e->items.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (cur().type == TokenType::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && look().type == TokenType::Name && look().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare);
        cmp->items.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(expr);
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      left = binary(Expr::Kind::Binary, std::move(left), parse_concat(), op);
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary(Expr::Kind::Binary, std::move(left), parse_math2(), "~");
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      left = binary(Expr::Kind::Binary, std::move(left), parse_pow(), op);
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (skip_op("**"))
      left = binary(Expr::Kind::Binary, std::move(left), parse_unary(true), "**");
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos);
      next();
      node->items.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (t.type == TokenType::Name) {
      auto e = make(Expr::Kind::Const);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::Name;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.type == TokenType::String) {
      auto e = make(Expr::Kind::Const);
      std::string s = t.text;
      next();
      while (cur().type == TokenType::String) {
        s += cur().text;
        next();
      }
      e->value = Value::str(std::move(s));
      return e;
    }
    if (t.type == TokenType::Integer || t.type == TokenType::Float) {
      auto e = make(Expr::Kind::Const);
      e->value = t.type == TokenType::Integer ? Value::integer(t.int_value)
                                              : Value::floating(t.float_value);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true, false);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(Expr::Kind::List);
      next();
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return seal(std::move(e));
    }
    if (is_op("{")) {
      auto e = make(Expr::Kind::Dict);
      next();
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return seal(std::move(e));
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      if (is_op(".") || is_op("[")) {
        node = seal(parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        node = seal(parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = seal(parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(*this);
    if (skip_op(".")) {
      if (cur().type == TokenType::Name) {
        auto e = make(Expr::Kind::GetAttr);
        e->name = cur().text;
        next();
        e->items.push_back(std::move(node));
        return e;
      }
      if (cur().type == TokenType::Integer) {
        auto e = make(Expr::Kind::GetItem);
        auto key = make(Expr::Kind::Const);
        key->value = Value::integer(cur().int_value);
        next();
        e->items.push_back(std::move(node));
        e->items.push_back(std::move(key));
        return e;
      }
      fail_here("expected name or number");
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail_here("expected a subscript");
    auto e = make(Expr::Kind::GetItem);
    e->items.push_back(std::move(node));
    if (args.size() == 1) {
      e->items.push_back(std::move(args[0]));
    } else {
      auto t = make(Expr::Kind::Tuple);
      t->items = std::move(args);
      e->items.push_back(seal(std::move(t)));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    std::vector<ExprPtr> args;
    if (skip_op(":")) {
      args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      args.push_back(std::move(node));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(","))
        args.push_back(parse_expression(true));
      else
        args.push_back(nullptr);
    } else {
      args.push_back(nullptr);
    }
    auto e = make(Expr::Kind::Slice);
    e->items = std::move(args);
    return seal(std::move(e));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        e.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::Name && look().type == TokenType::Operator &&
                 look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (e.dyn_args || e.dyn_kwargs || !e.keyword.empty())
          fail_here("invalid syntax for function call expression");
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(*this);
    auto e = make(Expr::Kind::Call);
    e->items.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      DepthGuard guard(*this);
      if (!start_inline) next();
      start_inline = false;
      auto e = make(Expr::Kind::Filter);
      e->name = expect_any_name();
      while (skip_op(".")) e->name += "." + expect_any_name();
      e->items.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = seal(std::move(e));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(*this);
    expect_name("is");
    const bool negated = skip_name("not");
    auto e = make(Expr::Kind::Test);
    e->name = expect_any_name();
    while (skip_op(".")) e->name += "." + expect_any_name();
    e->items.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == TokenType::Name || cur().type == TokenType::String ||
                cur().type == TokenType::Integer || cur().type == TokenType::Float || is_op("(") ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    e = seal(std::move(e));
    if (!negated) return e;
    auto n = make(Expr::Kind::Not);
    n->items.push_back(std::move(e));
    return seal(std::move(n));
  }

  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) {
  return Parser(tokenize(source)).parse();
}

}  // namespace rkv::jinja
