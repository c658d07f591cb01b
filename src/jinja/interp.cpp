// Rendering: statements, expressions, scoping, macros and loops with Jinja2's semantics (its
// compiled code's behaviour, jinja2/compiler.py and runtime.py) in the immutable sandbox.
//
// Scoping follows Jinja2: {% set %} at the top level or inside {% if %} binds in the enclosing
// scope; each iteration of a {% for %} body gets a fresh scope (what it sets is gone at the next
// iteration and after the loop); a macro sees the scope it was defined in as it is when called.
#include "jinja/interp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "jinja/parser.h"
#include "jinja/unicode.h"

namespace rkv::jinja {

namespace {

// The nesting of eval/exec calls beyond which rendering stops (a macro recursion of expressions
// that are themselves deep); keeps the native stack bounded.
constexpr int kMaxEvalDepth = 3000;

struct EvalDepth {
  EvalDepth(int& d) : depth(d) {
    if (++depth > kMaxEvalDepth) {
      --depth;
      fail(ErrorKind::LimitExceeded, "the template recurses too deeply");
    }
  }
  ~EvalDepth() { --depth; }
  EvalDepth(const EvalDepth&) = delete;
  EvalDepth& operator=(const EvalDepth&) = delete;
  int& depth;
};

[[noreturn]] void raise_undefined(const Value& v) {
  const UndefinedInfo& info = v.undefined_info();
  fail(info.kind, info.message);
}

bool checked_add(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}
bool checked_sub(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return !__builtin_sub_overflow(a, b, &out);
}
bool checked_mul(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
[[noreturn]] void int_overflow() {
  fail(ErrorKind::LimitExceeded, "integer result does not fit in 64 bits");
}

}  // namespace

// ---- objects of the renderer -------------------------------------------------------------------

Value Namespace::getattr(const Value& self, const std::string& name) const {
  if (const Value* v = attrs.find(std::string_view(name))) return *v;
  return Object::getattr(self, name);
}

std::string Namespace::repr() const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs.items) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k, 1);
    out += ": ";
    append_repr(out, v, 1);
  }
  return out + "}>";
}

// A {% macro %} (or the caller of a {% call %} block).
class Macro : public Object {
 public:
  Macro(const Stmt& def, const ScopePtr& closure, bool is_caller)
      : def_(def), closure_(closure), is_caller_(is_caller) {}
  std::string type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  std::string repr() const override {
    return "<Macro '" + (is_caller_ ? std::string("caller") : def_.text) + "'>";
  }
  Value getattr(const Value& self, const std::string& name) const override {
    if (name == "name") return Value::str(is_caller_ ? "caller" : def_.text);
    return Object::getattr(self, name);
  }
  Value call(Interp& interp, CallArgs& args) override {
    interp.enter_call();
    struct Leave {
      Interp& i;
      ~Leave() { i.leave_call(); }
    } leave{interp};
    auto scope = std::make_shared<Scope>();
    scope->parent = closure_.lock();
    if (!scope->parent) scope->parent = interp.root();
    const std::size_t npos = args.positional.size();
    std::vector<bool> used(args.keyword.size(), false);
    for (std::size_t i = 0; i < def_.params.size(); ++i) {
      const MacroParam& p = def_.params[i];
      Value v;
      bool found = false;
      if (i < npos) {
        v = args.positional[i];
        found = true;
      } else {
        for (std::size_t k = 0; k < args.keyword.size(); ++k) {
          if (args.keyword[k].first == p.name) {
            v = args.keyword[k].second;
            used[k] = true;
            found = true;
          }
        }
      }
      if (!found) {
        v = p.default_value ? interp.eval(*p.default_value, scope)
                            : Value::undefined("parameter '" + p.name + "' was not provided");
      }
      scope->set(p.name, std::move(v));
    }
    std::vector<Value> varargs;
    for (std::size_t i = def_.params.size(); i < npos; ++i) varargs.push_back(args.positional[i]);
    DictData kwargs;
    bool caller_given = false;
    for (std::size_t k = 0; k < args.keyword.size(); ++k) {
      if (used[k]) continue;
      if (args.keyword[k].first == "caller") {
        scope->set("caller", args.keyword[k].second);
        caller_given = true;
        continue;
      }
      kwargs.set(Value::str(args.keyword[k].first), args.keyword[k].second);
    }
    if (!caller_given && !is_caller_)
      scope->set("caller", Value::undefined("'caller' is undefined"));
    scope->set("varargs", Value::tuple(std::move(varargs)));
    scope->set("kwargs", Value::dict(std::move(kwargs)));
    return Value::str(interp.capture(def_.body, scope));
  }

 private:
  const Stmt& def_;
  std::weak_ptr<Scope> closure_;
  bool is_caller_;
};

// The `loop` variable of a {% for %}.
class LoopObject : public Object {
 public:
  LoopObject(const Stmt& stmt, const ScopePtr& scope, std::shared_ptr<ListData> items, int depth0)
      : stmt_(stmt), scope_(scope), items_(std::move(items)), depth0_(depth0) {
    for (const Value& v : items_->items) depth_ = std::max(depth_, v.depth() + 1);
    if (depth_ > kMaxValueDepth) fail(ErrorKind::LimitExceeded, "values nest too deeply");
  }
  int depth() const override { return depth_; }
  std::string type_name() const override { return "LoopContext"; }
  bool callable() const override { return true; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(length()) + ">";
  }
  std::int64_t length() const { return static_cast<std::int64_t>(items_->items.size()); }

  Value getattr(const Value& self, const std::string& name) const override {
    const std::int64_t n = length();
    if (name == "index") return Value::integer(index0_ + 1);
    if (name == "index0") return Value::integer(index0_);
    if (name == "revindex") return Value::integer(n - index0_);
    if (name == "revindex0") return Value::integer(n - index0_ - 1);
    if (name == "first") return Value::boolean(index0_ == 0);
    if (name == "last") return Value::boolean(index0_ == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth0_ + 1);
    if (name == "depth0") return Value::integer(depth0_);
    if (name == "previtem") {
      if (index0_ <= 0) return Value::undefined("there is no previous item");
      return items_->items[static_cast<std::size_t>(index0_ - 1)];
    }
    if (name == "nextitem") {
      if (index0_ + 1 >= n) return Value::undefined("there is no next item");
      return items_->items[static_cast<std::size_t>(index0_ + 1)];
    }
    if (name == "cycle") return Value::object(std::make_shared<Function>("cycle", &cycle, self));
    if (name == "changed")
      return Value::object(std::make_shared<Function>("changed", &changed, self));
    return Object::getattr(self, name);
  }

  // loop(items) in a recursive loop: renders the body over `items` one level deeper.
  Value call(Interp& interp, CallArgs& args) override {
    if (!stmt_.recursive)
      fail(ErrorKind::TypeError,
           "The loop must be marked as recursive (`for ... recursive`) to be called");
    if (args.positional.size() != 1 || !args.keyword.empty())
      fail(ErrorKind::TypeError, "loop() takes exactly one argument");
    ScopePtr scope = scope_.lock();
    if (!scope) scope = interp.root();
    interp.enter_call();
    struct Leave {
      Interp& i;
      ~Leave() { i.leave_call(); }
    } leave{interp};
    return Value::str(
        interp.run_loop(stmt_, scope, interp.iterate(args.positional[0]), depth0_ + 1, nullptr));
  }

  std::int64_t index0_ = -1;
  Value last_changed_;
  bool has_changed_ = false;

 private:
  static Value cycle(Interp&, const Value& self, CallArgs& args) {
    auto* loop = static_cast<LoopObject*>(self.obj().get());
    if (args.positional.empty()) fail(ErrorKind::TypeError, "no items for cycling given");
    const std::size_t i = static_cast<std::size_t>(loop->index0_) % args.positional.size();
    return args.positional[i];
  }
  static Value changed(Interp&, const Value& self, CallArgs& args) {
    auto* loop = static_cast<LoopObject*>(self.obj().get());
    Value now = Value::list(args.positional);
    if (now.depth() + 1 > kMaxValueDepth) fail(ErrorKind::LimitExceeded, "values nest too deeply");
    loop->depth_ = std::max(loop->depth_, now.depth() + 1);
    if (!loop->has_changed_ || !equals(loop->last_changed_, now)) {
      loop->last_changed_ = std::move(now);
      loop->has_changed_ = true;
      return Value::boolean(true);
    }
    return Value::boolean(false);
  }

  const Stmt& stmt_;
  std::weak_ptr<Scope> scope_;
  std::shared_ptr<ListData> items_;
  int depth0_;
  int depth_ = 1;
};

// ---- Args --------------------------------------------------------------------------------------

Value Args::get(std::size_t pos, std::string_view key, Value def) {
  for (const auto& [k, v] : args_.keyword) {
    if (k == key) {
      if (pos < args_.positional.size())
        fail(ErrorKind::TypeError,
             name_ + "() got multiple values for argument '" + std::string(key) + "'");
      used_.emplace_back(key);
      return v;
    }
  }
  if (pos < args_.positional.size()) return args_.positional[pos];
  return def;
}

bool Args::has(std::size_t pos, std::string_view key) const {
  if (pos < args_.positional.size()) return true;
  for (const auto& [k, v] : args_.keyword)
    if (k == key) return true;
  return false;
}

void Args::done(std::size_t max_positional) const {
  if (args_.positional.size() > max_positional)
    fail(ErrorKind::TypeError, name_ + "() takes at most " + std::to_string(max_positional) +
                                   " positional argument(s) (" +
                                   std::to_string(args_.positional.size()) + " given)");
  for (const auto& [k, v] : args_.keyword) {
    if (std::find(used_.begin(), used_.end(), k) == used_.end())
      fail(ErrorKind::TypeError, name_ + "() got an unexpected keyword argument '" + k + "'");
  }
}

// ---- Interp ------------------------------------------------------------------------------------

Interp::Interp(const RenderOptions& options, std::string& out) : options_(options), out_(&out) {
  globals_ = std::make_shared<Scope>();
  install_globals(*globals_);
  root_ = globals_;
}

Interp::~Interp() {
  // Namespaces are the only values a template can make cycles of (ns.self = ns): empty every one
  // first, then let go of what they held, so nothing leaks and no destructor recurses deeply.
  std::vector<Value> held;
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) {
      for (auto& [k, v] : ns->attrs.items) held.push_back(std::move(v));
      ns->attrs.items.clear();
    }
  }
}

void Interp::charge(std::uint64_t units) {
  work_ += units;
  if (work_ > options_.max_work)
    fail(ErrorKind::LimitExceeded,
         "rendering took more than " + std::to_string(options_.max_work) + " steps");
}

void Interp::check_size(std::size_t bytes) const {
  if (bytes > options_.max_output_bytes)
    fail(ErrorKind::LimitExceeded,
         "a string of more than " + std::to_string(options_.max_output_bytes) + " bytes");
}

void Interp::enter_call() {
  if (++call_depth_ > options_.max_call_depth) {
    --call_depth_;
    fail(ErrorKind::LimitExceeded,
         "macro calls nest more than " + std::to_string(options_.max_call_depth) + " deep");
  }
}

Value Interp::make_namespace() {
  auto ns = std::make_shared<Namespace>();
  namespaces_.push_back(ns);
  charge(16);
  return Value::object(ns);
}

void Interp::emit(std::string_view text) {
  if (out_->size() + text.size() > options_.max_output_bytes)
    fail(ErrorKind::LimitExceeded,
         "the output would pass " + std::to_string(options_.max_output_bytes) + " bytes");
  charge(text.size() / 16 + 1);
  out_->append(text);
}

std::string Interp::capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Interp::Flow Interp::exec(const Body& body, const ScopePtr& scope) {
  EvalDepth guard(eval_depth_);
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, scope);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Interp::assign(const Target& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case Target::Kind::Name:
      scope->set(target.name, value);
      return;
    case Target::Kind::Attr: {
      const Value* ns = scope->find(target.name);
      if (ns == nullptr || !ns->is_object() || !ns->obj()->is_namespace())
        fail(ErrorKind::TemplateRuntimeError, "cannot assign attribute on non-namespace object");
      static_cast<Namespace*>(ns->obj().get())->attrs.set(Value::str(target.attr), value);
      return;
    }
    case Target::Kind::Tuple: {
      std::vector<Value> items = iterate(value);
      if (items.size() != target.items.size()) {
        if (items.size() < target.items.size())
          fail(ErrorKind::ValueError, "not enough values to unpack (expected " +
                                          std::to_string(target.items.size()) + ", got " +
                                          std::to_string(items.size()) + ")");
        fail(ErrorKind::ValueError,
             "too many values to unpack (expected " + std::to_string(target.items.size()) + ")");
      }
      for (std::size_t i = 0; i < items.size(); ++i) assign(target.items[i], items[i], scope);
      return;
    }
  }
}

namespace {
// Applies a chain of filters (Filter nodes whose innermost subject is null) to `subject`.
Value apply_filter_chain(Interp& interp, const Expr& chain, Value subject, const ScopePtr& scope);
}  // namespace

Interp::Flow Interp::exec_stmt(const Stmt& s, const ScopePtr& scope) {
  charge(1);
  switch (s.kind) {
    case Stmt::Kind::Output:
      emit(s.text);
      return Flow::Normal;
    case Stmt::Kind::Print: {
      const Value v = eval(*s.exprs[0], scope);
      if (v.is_str())
        emit(v.as_str());
      else
        emit(to_str(v));
      return Flow::Normal;
    }
    case Stmt::Kind::If:
      for (std::size_t i = 0; i < s.exprs.size(); ++i) {
        if (truthy(eval(*s.exprs[i], scope))) return exec(s.bodies[i], scope);
      }
      return exec(s.else_body, scope);
    case Stmt::Kind::For:
      return exec_for(s, scope);
    case Stmt::Kind::Set:
      assign(s.target, eval(*s.exprs[0], scope), scope);
      return Flow::Normal;
    case Stmt::Kind::SetBlock: {
      Value v = Value::str(capture(s.body, scope));
      if (!s.exprs.empty()) v = apply_filter_chain(*this, *s.exprs[0], std::move(v), scope);
      assign(s.target, v, scope);
      return Flow::Normal;
    }
    case Stmt::Kind::Macro:
      scope->set(s.text, Value::object(std::make_shared<Macro>(s, scope, false)));
      return Flow::Normal;
    case Stmt::Kind::CallBlock: {
      const Expr& call = *s.exprs[0];
      const Value callee = eval(*call.items[0], scope);
      CallArgs args = eval_args(call, 1, scope);
      args.keyword.emplace_back("caller", Value::object(std::make_shared<Macro>(s, scope, true)));
      emit(to_str(this->call(callee, args)));
      return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
      Value v = Value::str(capture(s.body, scope));
      emit(to_str(apply_filter_chain(*this, *s.exprs[0], std::move(v), scope)));
      return Flow::Normal;
    }
    case Stmt::Kind::With: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (std::size_t i = 0; i < s.targets.size(); ++i)
        assign(s.targets[i], eval(*s.exprs[i], scope), inner);
      return exec(s.body, inner);
    }
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
    case Stmt::Kind::Scope:
      return exec(s.body, scope);
  }
  return Flow::Normal;
}

Interp::Flow Interp::exec_for(const Stmt& s, const ScopePtr& scope) {
  std::vector<Value> items = iterate(eval(*s.exprs[0], scope));
  bool iterated = false;
  run_loop(s, scope, std::move(items), 0, &iterated);
  if (!iterated) return exec(s.else_body, scope);
  return Flow::Normal;
}

std::string Interp::run_loop(const Stmt& s, const ScopePtr& scope, std::vector<Value> items,
                             int depth, bool* iterated) {
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      charge(1);
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(s.target, item, probe);
      if (truthy(eval(*s.filter, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  auto loop = std::make_shared<LoopObject>(s, scope, data, depth);
  const Value loop_value = Value::object(loop);
  std::string buffer;
  std::string* saved = out_;
  if (iterated == nullptr) out_ = &buffer;  // a recursive call returns its text
  try {
    for (std::size_t i = 0; i < data->items.size(); ++i) {
      charge(1);
      if (iterated != nullptr) *iterated = true;
      loop->index0_ = static_cast<std::int64_t>(i);
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      assign(s.target, data->items[i], inner);
      inner->set("loop", loop_value);
      if (exec(s.body, inner) == Flow::Break) break;
    }
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

// ---- expressions -------------------------------------------------------------------------------

CallArgs Interp::eval_args(const Expr& e, std::size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (std::size_t i = first; i < e.items.size(); ++i)
    args.positional.push_back(eval(*e.items[i], scope));
  for (const auto& [k, v] : e.keyword) args.keyword.emplace_back(k, eval(*v, scope));
  if (e.dyn_args) {
    for (Value& v : iterate(eval(*e.dyn_args, scope))) args.positional.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    const Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) fail(ErrorKind::TypeError, "argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict().items) {
      if (!k.is_str()) fail(ErrorKind::TypeError, "keywords must be strings");
      args.keyword.emplace_back(k.as_str(), v);
    }
  }
  return args;
}

namespace {
Value apply_filter_chain(Interp& interp, const Expr& chain, Value subject, const ScopePtr& scope) {
  if (chain.kind != Expr::Kind::Filter) return subject;
  if (chain.items[0])
    subject = apply_filter_chain(interp, *chain.items[0], std::move(subject), scope);
  CallArgs args;
  for (std::size_t i = 1; i < chain.items.size(); ++i)
    args.positional.push_back(interp.eval(*chain.items[i], scope));
  for (const auto& [k, v] : chain.keyword) args.keyword.emplace_back(k, interp.eval(*v, scope));
  return interp.filter(chain.name, subject, args);
}
}  // namespace

Value Interp::eval(const Expr& e, const ScopePtr& scope) {
  EvalDepth guard(eval_depth_);
  charge(1);
  switch (e.kind) {
    case Expr::Kind::Const:
      return e.value;
    case Expr::Kind::Name: {
      if (const Value* v = scope->find(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::Tuple:
    case Expr::Kind::List: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, scope));
      return e.kind == Expr::Kind::Tuple ? Value::tuple(std::move(items))
                                         : Value::list(std::move(items));
    }
    case Expr::Kind::Dict: {
      DictData d;
      for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        if (k.is_list() || k.is_dict() || k.is_undefined())
          fail(ErrorKind::TypeError, "unhashable type: '" + k.type_name() + "'");
        d.set(std::move(k), eval(*e.items[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::GetAttr:
      return getattr(eval(*e.items[0], scope), e.name);
    case Expr::Kind::GetItem: {
      const Value obj = eval(*e.items[0], scope);
      const Expr& key = *e.items[1];
      if (key.kind == Expr::Kind::Slice) {
        if (obj.is_undefined()) raise_undefined(obj);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          parts[i] = key.items[static_cast<std::size_t>(i)]
                         ? eval(*key.items[static_cast<std::size_t>(i)], scope)
                         : Value::none();
        return slice_value(this, obj, parts[0], parts[1], parts[2]);
      }
      return getitem(obj, eval(key, scope));
    }
    case Expr::Kind::Slice:
      fail(ErrorKind::TemplateRuntimeError, "a slice outside of a subscript");
    case Expr::Kind::Call: {
      const Value callee = eval(*e.items[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return call(callee, args);
    }
    case Expr::Kind::Filter: {
      if (!e.items[0]) fail(ErrorKind::TemplateRuntimeError, "a filter without a value");
      const Value v = eval(*e.items[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return filter(e.name, v, args);
    }
    case Expr::Kind::Test: {
      const Value v = eval(*e.items[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return Value::boolean(test(e.name, v, args));
    }
    case Expr::Kind::Not:
      return Value::boolean(!truthy(eval(*e.items[0], scope)));
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      const Value v = eval(*e.items[0], scope);
      if (v.is_undefined()) raise_undefined(v);
      const bool neg = e.kind == Expr::Kind::Neg;
      if (v.is_float()) return Value::floating(neg ? -v.as_double() : v.as_double());
      if (v.is_integral()) {
        if (!neg) return Value::integer(v.as_int());
        if (v.as_int() == std::numeric_limits<std::int64_t>::min()) int_overflow();
        return Value::integer(-v.as_int());
      }
      fail(ErrorKind::TypeError, std::string("bad operand type for unary ") + (neg ? "-" : "+") +
                                     ": '" + v.type_name() + "'");
    }
    case Expr::Kind::Binary:
      return eval_binary(e.name, eval(*e.items[0], scope), eval(*e.items[1], scope));
    case Expr::Kind::And: {
      Value a = eval(*e.items[0], scope);
      if (!truthy(a)) return a;
      return eval(*e.items[1], scope);
    }
    case Expr::Kind::Or: {
      Value a = eval(*e.items[0], scope);
      if (truthy(a)) return a;
      return eval(*e.items[1], scope);
    }
    case Expr::Kind::Compare: {
      Value left = eval(*e.items[0], scope);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1], scope);
        const Value r = eval_compare(e.ops[i], left, right);
        if (!truthy(r)) return r;
        if (i + 1 == e.ops.size()) return r;
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::CondExpr: {
      if (truthy(eval(*e.items[0], scope))) return eval(*e.items[1], scope);
      if (e.items[2]) return eval(*e.items[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value::undefined("unknown expression");
}

namespace {
[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail(ErrorKind::TypeError, "unsupported operand type(s) for " + op + ": '" + a.type_name() +
                                 "' and '" + b.type_name() + "'");
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
}  // namespace

Value Interp::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a);
    std::string t = to_str(b);
    check_size(s.size() + t.size());
    charge((s.size() + t.size()) / 4);
    return Value::str(s + t);
  }
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) {
      if (floats) return Value::floating(a.as_double() + b.as_double());
      std::int64_t r;
      if (!checked_add(a.as_int(), b.as_int(), r)) int_overflow();
      return Value::integer(r);
    }
    if (a.is_str() && b.is_str()) {
      check_size(a.as_str().size() + b.as_str().size());
      charge((a.as_str().size() + b.as_str().size()) / 4);
      if (a.is_markup() == b.is_markup())
        return a.is_markup() ? Value::markup(a.as_str() + b.as_str())
                             : Value::str(a.as_str() + b.as_str());
      // Markup + str escapes the plain side (markupsafe's __add__ and __radd__).
      if (a.is_markup()) return Value::markup(a.as_str() + html_escape(b.as_str()));
      return Value::markup(html_escape(a.as_str()) + b.as_str());
    }
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      std::vector<Value> items = a.items();
      // A list item costs about 100 bytes: items count 4 units of work, and one list holds at
      // most max_output_bytes / 16 of them.
      charge(4 * (items.size() + b.items().size()));
      check_size(16 * (items.size() + b.items().size()));
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (a.is_str() || a.is_list() || a.is_tuple())
      fail(ErrorKind::TypeError, "can only concatenate " + a.type_name() + " (not \"" +
                                     b.type_name() + "\") to " + a.type_name());
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported("-", a, b);
    if (floats) return Value::floating(a.as_double() - b.as_double());
    std::int64_t r;
    if (!checked_sub(a.as_int(), b.as_int(), r)) int_overflow();
    return Value::integer(r);
  }
  if (op == "*") {
    if (numbers) {
      if (floats) return Value::floating(a.as_double() * b.as_double());
      std::int64_t r;
      if (!checked_mul(a.as_int(), b.as_int(), r)) int_overflow();
      return Value::integer(r);
    }
    const Value* seq = a.is_integral() ? &b : &a;
    const Value* count = a.is_integral() ? &a : &b;
    if (count->is_integral() && (seq->is_str() || seq->is_list() || seq->is_tuple())) {
      const std::int64_t n = std::max<std::int64_t>(0, count->as_int());
      const std::size_t unit = seq->is_str() ? seq->as_str().size() : seq->items().size();
      const std::size_t item_bytes = seq->is_str() ? 1 : 16;
      if (unit > 0 &&
          static_cast<std::uint64_t>(n) > options_.max_output_bytes / (unit * item_bytes))
        check_size(options_.max_output_bytes + 1);
      const std::size_t total = unit * static_cast<std::size_t>(n);
      charge(seq->is_str() ? total / 4 + 1 : 4 * total + 1);
      if (seq->is_str()) {
        std::string out;
        out.reserve(total);
        for (std::int64_t i = 0; i < n; ++i) out += seq->as_str();
        return Value::str(std::move(out));
      }
      std::vector<Value> items;
      items.reserve(total);
      for (std::int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq->items().begin(), seq->items().end());
      return seq->is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (seq->is_str() || seq->is_list() || seq->is_tuple())
      fail(ErrorKind::TypeError,
           "can't multiply sequence by non-int of type '" + count->type_name() + "'");
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported("/", a, b);
    if (b.as_double() == 0) fail(ErrorKind::ValueError, "division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!numbers) unsupported("//", a, b);
    if (b.as_double() == 0) fail(ErrorKind::ValueError, "integer division or modulo by zero");
    if (floats) return Value::floating(std::floor(a.as_double() / b.as_double()));
    const std::int64_t x = a.as_int(), y = b.as_int();
    if (x == std::numeric_limits<std::int64_t>::min() && y == -1) int_overflow();
    std::int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value::integer(q);
  }
  if (op == "%") {
    if (a.is_markup()) {
      // Markup % args escapes the string arguments.
      auto esc = [](const Value& x) {
        return x.is_str() && !x.is_markup() ? Value::markup(html_escape(x.as_str())) : x;
      };
      Value args = b;
      if (b.is_tuple()) {
        std::vector<Value> items;
        for (const Value& x : b.items()) items.push_back(esc(x));
        args = Value::tuple(std::move(items));
      } else if (b.is_dict()) {
        DictData d;
        for (const auto& [k, x] : b.dict().items) d.items.emplace_back(k, esc(x));
        args = Value::dict(std::move(d));
      } else {
        args = esc(b);
      }
      return Value::markup(percent_format(*this, a.as_str(), args));
    }
    if (a.is_str()) return Value::str(percent_format(*this, a.as_str(), b));
    if (!numbers) unsupported("%", a, b);
    if (b.as_double() == 0) fail(ErrorKind::ValueError, "integer division or modulo by zero");
    if (floats) return Value::floating(floor_mod(a.as_double(), b.as_double()));
    const std::int64_t x = a.as_int(), y = b.as_int();
    if (y == -1) return Value::integer(0);
    std::int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::integer(m);
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (floats || b.as_int() < 0) {
      if (a.as_double() == 0 && b.as_double() < 0)
        fail(ErrorKind::ValueError, "0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(a.as_double(), b.as_double()));
    }
    std::int64_t result = 1, base = a.as_int(), exp = b.as_int();
    while (exp > 0) {
      charge(1);
      if (exp & 1) {
        if (!checked_mul(result, base, result)) int_overflow();
      }
      exp >>= 1;
      if (exp > 0 && !checked_mul(base, base, base)) int_overflow();
    }
    return Value::integer(result);
  }
  fail(ErrorKind::TemplateRuntimeError, "unknown operator " + op);
}

namespace {
bool contains(Interp& interp, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Str:
      if (!item.is_str())
        fail(ErrorKind::TypeError,
             "'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_str().find(item.as_str()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& v : container.items())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Generator:
      for (const Value& v : interp.iterate(container))
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      return container.dict().find(item) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      fail(ErrorKind::TypeError,
           "argument of type '" + container.type_name() + "' is not iterable");
  }
}
}  // namespace

Value Interp::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "in") return Value::boolean(contains(*this, b, a));
  if (op == "notin") return Value::boolean(!contains(*this, b, a));
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (op == "<") return Value::boolean(less(a, b));
  if (op == ">") return Value::boolean(less(b, a));
  if (op == "<=") return Value::boolean(less(a, b) || equals(a, b));
  if (op == ">=") return Value::boolean(less(b, a) || equals(a, b));
  fail(ErrorKind::TemplateRuntimeError, "unknown comparison " + op);
}

// ---- attribute and item access, calls ----------------------------------------------------------

Value Interp::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) raise_undefined(obj);
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_')
    return Value::undefined(
        "access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.",
        ErrorKind::SecurityError);
  switch (obj.kind()) {
    case Value::Kind::Dict: {
      Value m = method_of(obj, name);
      if (!m.is_undefined() || m.undefined_info().kind == ErrorKind::SecurityError) return m;
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      break;
    }
    case Value::Kind::Str:
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      Value m = method_of(obj, name);
      if (!m.is_undefined() || m.undefined_info().kind == ErrorKind::SecurityError) return m;
      break;
    }
    case Value::Kind::Object:
      return obj.obj()->getattr(obj, name);
    default:
      break;
  }
  return Value::undefined("'" + obj.object_type_repr() + "' has no attribute '" + name + "'");
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) raise_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (!key.is_list() && !key.is_dict()) {
        if (const Value* v = obj.dict().find(key)) return *v;
      }
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (key.is_integral()) {
        const auto n = static_cast<std::int64_t>(obj.items().size());
        std::int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<std::size_t>(i)];
      }
      break;
    case Value::Kind::Str:
      if (key.is_integral()) {
        const std::string& s = obj.as_str();
        std::int64_t i = key.as_int();
        if (unicode::is_ascii(s)) {
          const auto n = static_cast<std::int64_t>(s.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value::str(std::string(1, s[static_cast<std::size_t>(i)]));
        } else {
          const std::vector<std::size_t> off = unicode::offsets(s);
          const auto n = static_cast<std::int64_t>(off.size() - 1);
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            const auto k = static_cast<std::size_t>(i);
            return Value::str(s.substr(off[k], off[k + 1] - off[k]));
          }
        }
      }
      break;
    default:
      break;
  }
  if (key.is_str()) {
    if (obj.is_object()) return obj.obj()->getattr(obj, key.as_str());
    Value m = getattr(obj, key.as_str());
    if (obj.is_dict() && m.is_undefined() && m.undefined_info().kind != ErrorKind::SecurityError)
      return Value::undefined("'" + obj.object_type_repr() + "' has no attribute '" + key.as_str() +
                              "'");
    return m;
  }
  return Value::undefined(obj.object_type_repr() + " has no element " + repr(key));
}

Value Interp::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) raise_undefined(callee);
  if (callee.is_object() && callee.obj()->callable()) return callee.obj()->call(*this, args);
  fail(ErrorKind::TypeError, "'" + callee.type_name() + "' object is not callable");
}

Value Interp::filter(const std::string& name, const Value& value, CallArgs& args) {
  return apply_filter(*this, name, value, args);
}

bool Interp::test(const std::string& name, const Value& value, CallArgs& args) {
  return apply_test(*this, name, value, args);
}

std::vector<Value> Interp::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
    case Value::Kind::Tuple:
      charge(v.items().size());
      return v.items();
    case Value::Kind::Generator: {
      if (v.list_data()->consumed) return {};
      v.list_data()->consumed = true;
      charge(v.items().size());
      return v.items();
    }
    case Value::Kind::Str: {
      std::vector<Value> out;
      const std::string& s = v.as_str();
      charge(s.size());
      std::size_t pos = 0;
      while (pos < s.size()) {
        std::size_t len = 1;
        unicode::decode(s, pos, len);
        out.push_back(Value::str(s.substr(pos, len)));
        pos += len;
      }
      return out;
    }
    case Value::Kind::Dict: {
      std::vector<Value> out;
      charge(v.dict().items.size());
      for (const auto& [k, val] : v.dict().items) out.push_back(k);
      return out;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      fail(ErrorKind::TypeError, "'" + v.type_name() + "' object is not iterable");
  }
}

// ---- Template ----------------------------------------------------------------------------------

Template Template::compile(std::string_view source) {
  Template t;
  t.body_ = std::make_shared<const Body>(parse_template(source));
  return t;
}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& variables,
                             const RenderOptions& options) const {
  std::string out;
  if (!body_) return out;  // a default-constructed Template renders nothing
  Interp interp(options, out);
  auto root = std::make_shared<Scope>();
  root->parent = interp.globals();
  for (const auto& [name, value] : variables) root->set(name, value);
  interp.set_root(root);
  interp.exec(*body_, root);
  return out;
}

std::string Template::render(const nlohmann::ordered_json& variables,
                             const RenderOptions& options) const {
  if (!variables.is_object())
    fail(ErrorKind::TypeError, "the variables of a template must be a JSON object");
  std::vector<std::pair<std::string, Value>> vars;
  for (const auto& [k, v] : variables.items()) vars.emplace_back(k, from_json(v));
  return render(vars, options);
}

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth)
    fail(ErrorKind::LimitExceeded,
         "the JSON input nests more than " + std::to_string(kMaxValueDepth) + " deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      for (const auto& [k, v] : j.items()) d.set(Value::str(k), from_json_at(v, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}
}  // namespace

void bind(Variables& variables, const std::string& name, Value value) {
  for (auto& [n, v] : variables) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  variables.emplace_back(name, std::move(value));
}

Value from_json(const nlohmann::ordered_json& json) {
  return from_json_at(json, 0);
}

std::optional<std::tm> parse_date(std::string_view date) {
  if (date.size() != 10 || date[4] != '-' || date[7] != '-') return std::nullopt;
  auto num = [&](std::size_t pos, std::size_t len, int& out) {
    out = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (date[i] < '0' || date[i] > '9') return false;
      out = out * 10 + (date[i] - '0');
    }
    return true;
  };
  int y = 0, m = 0, d = 0;
  if (!num(0, 4, y) || !num(5, 2, m) || !num(8, 2, d)) return std::nullopt;
  if (m < 1 || m > 12 || d < 1 || d > 31) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  std::tm copy = tm;
  if (::timegm(&copy) == -1) return std::nullopt;
  if (copy.tm_mday != d || copy.tm_mon != m - 1) return std::nullopt;  // 2026-02-30
  copy.tm_isdst = 0;
  return copy;
}

}  // namespace rkv::jinja
