// The value model of the Jinja interpreter: Python's values as Jinja2 sees them (none, undefined,
// bool, int, float, str, list, tuple, dict in insertion order, generators, and objects such as
// namespaces, macros, loop objects and bound methods), with Python's str(), repr(), truthiness,
// equality and ordering. Lists and dicts are shared by reference like Python's; the sandbox keeps
// dicts immutable, and lists only shrink (list.pop, list.clear), so the only cycles a template
// can build go through namespaces, which the renderer breaks when it finishes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace rkv::jinja {

// The Python or Jinja2 exception class a failure corresponds to. LimitExceeded is rkv's own: a
// resource bound of RenderOptions was reached (Jinja2 would run on, or fail with MemoryError or
// RecursionError).
enum class ErrorKind {
  TemplateSyntaxError,
  TemplateError,
  SecurityError,
  TypeError,
  ValueError,
  UndefinedError,
  TemplateRuntimeError,
  LimitExceeded,
};

const char* error_kind_name(ErrorKind kind);

// Every failure of compiling or rendering a template. what() is the message alone (for
// TemplateError, the template's own raise_exception text); kind() says which exception it is.
class Error : public rkv::Error {
 public:
  Error(ErrorKind kind, const std::string& message) : rkv::Error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void fail(ErrorKind kind, const std::string& message);

class Value;
class Interp;
class Object;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct ListData {
  std::vector<Value> items;
  int depth = 1;          // nesting depth of lists, tuples and dicts, this one included
  bool consumed = false;  // a generator that has been iterated once
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces (Python's d[k] = v), keeping the first insertion's position.
  void set(Value key, Value value);
};

// Why an undefined value is undefined, and what using it raises.
struct UndefinedInfo {
  std::string message;  // "'x' is undefined", "'dict object' has no attribute 'y'"
  ErrorKind kind = ErrorKind::UndefinedError;
};

class Value {
 public:
  enum class Kind : std::uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    Str,
    List,
    Tuple,
    Dict,
    Generator,  // a one-shot iterator (select, map, items, ...): no len(), not JSON
    Object,
  };

  Value() : kind_(Kind::Undefined) {}
  static Value undefined(std::string message, ErrorKind kind = ErrorKind::UndefinedError);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value floating(double f);
  static Value str(std::string s);
  // markupsafe's Markup: a str marked safe (|safe, |escape); adding a plain str to it escapes that.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value generator(std::vector<Value> items);
  static Value dict(DictData d);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }  // not bool
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const {
    return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float;
  }
  bool is_integral() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }
  bool is_str() const { return kind_ == Kind::Str; }
  bool is_markup() const { return kind_ == Kind::Str && b_; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_generator() const { return kind_ == Kind::Generator; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& as_str() const { return *s_; }
  const std::vector<Value>& items() const { return list_->items; }  // list, tuple, generator
  const std::shared_ptr<ListData>& list_data() const { return list_; }
  const DictData& dict() const { return *dict_; }
  const std::shared_ptr<Object>& obj() const { return obj_; }
  const UndefinedInfo& undefined_info() const;

  // How deeply lists, tuples and dicts nest in this value (0 for a scalar).
  int depth() const;

  // Python's type name: 'NoneType', 'str', 'dict', ... ("Undefined" for undefined).
  std::string type_name() const;
  // Jinja2's object_type_repr: "None", "dict object", "str object", ...
  std::string object_type_repr() const;

 private:
  Kind kind_;
  bool b_ = false;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<const DictData> dict_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<const UndefinedInfo> undef_;
};

// Objects with attributes and calls of their own (namespace, loop, macro, bound methods, ...).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // An attribute; undefined when absent.
  virtual Value getattr(const Value& self, const std::string& name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Interp& interp, CallArgs& args);
  virtual std::string repr() const;
  virtual bool is_namespace() const { return false; }
  // How deeply the lists and dicts this object holds nest, plus one (0: holds none).
  virtual int depth() const { return 0; }
};

// Python truthiness.
bool truthy(const Value& v);
// Python str(): what {{ v }} prints (undefined prints "").
std::string to_str(const Value& v);
// Python repr().
std::string repr(const Value& v);
void append_repr(std::string& out, const Value& v, int depth);
std::string repr_str(std::string_view s);
std::string repr_float(double f);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python <; throws TypeError for unordered types.
bool less(const Value& a, const Value& b);

// Nesting depth beyond which building a list or dict is refused (a template could otherwise
// nest lists through a namespace in a loop until printing or freeing them overflowed the stack).
inline constexpr int kMaxValueDepth = 500;

}  // namespace rkv::jinja
