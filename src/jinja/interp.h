// The renderer's internals, shared by the interpreter (interp.cpp), the filters, tests and
// globals (builtins.cpp), Python's methods (methods.cpp) and the formatting (format.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace rkv::jinja {

// Variables of one scope: the globals, the template's top level, a loop iteration, a macro call.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [n, v] : vars) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

// namespace(): the one object whose attributes a template can set.
class Namespace : public Object {
 public:
  DictData attrs;
  std::string type_name() const override { return "Namespace"; }
  Value getattr(const Value& self, const std::string& name) const override;
  std::string repr() const override;
  bool is_namespace() const override { return true; }
};

// A function of the globals, a filter-like helper or a bound method.
class Function : public Object {
 public:
  using Impl = Value (*)(Interp&, const Value& self, CallArgs&);
  Function(std::string name, Impl impl, Value self = {})
      : name_(std::move(name)), impl_(impl), self_(std::move(self)), depth_(self_.depth() + 1) {
    if (depth_ > kMaxValueDepth) fail(ErrorKind::LimitExceeded, "values nest too deeply");
  }
  int depth() const override { return depth_; }
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Interp& interp, CallArgs& args) override { return impl_(interp, self_, args); }
  std::string repr() const override { return "<built-in method " + name_ + ">"; }

 private:
  std::string name_;
  Impl impl_;
  Value self_;
  int depth_;
};

// Positional-or-keyword argument access with Python's errors for a function `name`.
class Args {
 public:
  Args(CallArgs& args, std::string name) : args_(args), name_(std::move(name)) {}
  // The argument at `pos` (or keyword `key`); `def` when absent.
  Value get(std::size_t pos, std::string_view key, Value def = {});
  bool has(std::size_t pos, std::string_view key) const;
  std::size_t positional() const { return args_.positional.size(); }
  // Fails with TypeError when an argument was given that no get() took.
  void done(std::size_t max_positional) const;
  const CallArgs& raw() const { return args_; }

 private:
  CallArgs& args_;
  std::string name_;
  std::vector<std::string> used_;
};

class Interp {
 public:
  Interp(const RenderOptions& options, std::string& out);
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);

  // Renders `body` in `scope` into a string of its own (macros, set blocks, filter blocks).
  std::string capture(const Body& body, const ScopePtr& scope);

  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value filter(const std::string& name, const Value& value, CallArgs& args);
  bool test(const std::string& name, const Value& value, CallArgs& args);
  // The items of an iterable (a str's characters, a dict's keys); a generator is consumed.
  std::vector<Value> iterate(const Value& v);

  // Counts `units` of work against RenderOptions::max_work.
  void charge(std::uint64_t units);
  // Fails when a string of `bytes` would pass RenderOptions::max_output_bytes.
  void check_size(std::size_t bytes) const;
  void enter_call();
  void leave_call() { --call_depth_; }

  Value make_namespace();
  const RenderOptions& options() const { return options_; }
  const ScopePtr& globals() const { return globals_; }
  const ScopePtr& root() const { return root_; }
  void set_root(ScopePtr root) { root_ = std::move(root); }

 private:
  void emit(std::string_view text);
  void assign(const Target& target, const Value& value, const ScopePtr& scope);
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope);
  Flow exec_for(const Stmt& s, const ScopePtr& scope);
  friend class LoopObject;
  std::string run_loop(const Stmt& s, const ScopePtr& scope, std::vector<Value> items, int depth,
                       bool* iterated);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value eval_compare(const std::string& op, const Value& a, const Value& b);
  CallArgs eval_args(const Expr& e, std::size_t first, const ScopePtr& scope);

  const RenderOptions& options_;
  std::string* out_;
  std::uint64_t work_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  ScopePtr globals_;
  ScopePtr root_;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

// builtins.cpp
void install_globals(Scope& globals);
Value apply_filter(Interp& interp, const std::string& name, const Value& value, CallArgs& args);
bool apply_test(Interp& interp, const std::string& name, const Value& value, CallArgs& args);
bool has_test(const std::string& name);

// methods.cpp: a Python method of a str, list or dict (undefined when there is none, an
// undefined that raises SecurityError for a method the immutable sandbox refuses).
Value method_of(const Value& self, const std::string& name);

// format.cpp
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // -1: none
  std::string indent_text;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(Interp& interp, const Value& v, const JsonOptions& options);
// Python's str % args.
std::string percent_format(Interp& interp, const std::string& format, const Value& args);
// Python's str.format(*args, **kwargs).
std::string str_format(Interp& interp, const std::string& format, const CallArgs& args);
// Python's format(value, spec) for str, int and float.
std::string format_spec(const Value& v, std::string_view spec);

// markupsafe's escape of a str: & < > ' " as entities.
std::string html_escape(const std::string& s);

// Python int() of a str (base 10, or with a prefix for base 0); false when malformed.
bool parse_int(std::string_view s, int base, std::int64_t& out);
// Python float() of a str; false when malformed.
bool parse_float(std::string_view s, double& out);

// Python's slice of a str, list or tuple (step 0 raises ValueError).
Value slice_value(Interp* interp, const Value& v, const Value& start, const Value& stop,
                  const Value& step);

}  // namespace rkv::jinja
