// Python's value semantics for the Jinja interpreter (see value.h).
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/unicode.h"

namespace rkv::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::TemplateSyntaxError:
      return "TemplateSyntaxError";
    case ErrorKind::TemplateError:
      return "TemplateError";
    case ErrorKind::SecurityError:
      return "SecurityError";
    case ErrorKind::TypeError:
      return "TypeError";
    case ErrorKind::ValueError:
      return "ValueError";
    case ErrorKind::UndefinedError:
      return "UndefinedError";
    case ErrorKind::TemplateRuntimeError:
      return "TemplateRuntimeError";
    case ErrorKind::LimitExceeded:
      return "LimitExceeded";
  }
  return "Error";
}

void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

// ---- construction ----------------------------------------------------------------------------

namespace {
int depth_of(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  if (d + 1 > kMaxValueDepth)
    fail(ErrorKind::LimitExceeded,
         "lists and dicts nest more than " + std::to_string(kMaxValueDepth) + " deep");
  return d + 1;
}
}  // namespace

Value Value::undefined(std::string message, ErrorKind kind) {
  Value v;
  v.undef_ = std::make_shared<const UndefinedInfo>(UndefinedInfo{std::move(message), kind});
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::str(std::string s) {
  Value v;
  v.kind_ = Kind::Str;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::markup(std::string s) {
  Value v = str(std::move(s));
  v.b_ = true;
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<ListData>();
  v.list_->depth = depth_of(items);
  v.list_->items = std::move(items);
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Generator;
  return v;
}
Value Value::dict(DictData d) {
  Value v;
  v.kind_ = Kind::Dict;
  int depth = 0;
  for (const auto& [k, val] : d.items) depth = std::max({depth, k.depth(), val.depth()});
  if (depth + 1 > kMaxValueDepth)
    fail(ErrorKind::LimitExceeded,
         "lists and dicts nest more than " + std::to_string(kMaxValueDepth) + " deep");
  d.depth = depth + 1;
  v.dict_ = std::make_shared<const DictData>(std::move(d));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.obj_ = std::move(o);
  return v;
}

int Value::depth() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple:
    case Kind::Generator:
      return list_->depth;
    case Kind::Dict:
      return dict_->depth;
    case Kind::Object:
      return obj_->depth();
    default:
      return 0;
  }
}

const UndefinedInfo& Value::undefined_info() const {
  static const UndefinedInfo plain{"value is undefined", ErrorKind::UndefinedError};
  return undef_ ? *undef_ : plain;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::Str:
      return b_ ? "Markup" : "str";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return "dict";
    case Kind::Generator:
      return "generator";
    case Kind::Object:
      return obj_->type_name();
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (kind_ == Kind::None) return "None";
  return type_name() + " object";
}

// ---- dicts -------------------------------------------------------------------------------------

const Value* DictData::find(const Value& key) const {
  if (key.is_str()) return find(std::string_view(key.as_str()));
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_str() && k.as_str() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

// ---- objects -----------------------------------------------------------------------------------

Value Object::getattr(const Value& self, const std::string& name) const {
  return Value::undefined("'" + self.object_type_repr() + "' has no attribute '" + name + "'");
}

Value Object::call(Interp&, CallArgs&) {
  fail(ErrorKind::TypeError, "'" + type_name() + "' object is not callable");
}

std::string Object::repr() const {
  return "<" + type_name() + " object>";
}

// ---- truthiness, str, repr ---------------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_double() != 0.0;
    case Value::Kind::Str:
      return !v.as_str().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return !v.items().empty();
    case Value::Kind::Dict:
      return !v.dict().items.empty();
    case Value::Kind::Generator:
    case Value::Kind::Object:
      return true;
  }
  return false;
}

std::string repr_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  if (sci[0] == '-') {
    out = "-";
    sci.erase(0, 1);
  }
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out += digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." +
               digits.substr(static_cast<std::size_t>(exp + 1));
      }
    } else {
      out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

std::string repr_str(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (unicode::is_printable(cp)) {
      out.append(s.substr(pos, len));
    } else {
      char buf[16];
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    }
    pos += len;
  }
  out += quote;
  return out;
}

void append_repr(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth + 8) fail(ErrorKind::LimitExceeded, "value nests too deeply to print");
  switch (v.kind()) {
    case Value::Kind::Undefined:
      out += "Undefined";
      return;
    case Value::Kind::Str:
      out += repr_str(v.as_str());
      return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const bool tuple = v.is_tuple();
      out += tuple ? '(' : '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item, depth + 1);
      }
      if (tuple && v.items().size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return;
    }
    case Value::Kind::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k, depth + 1);
        out += ": ";
        append_repr(out, val, depth + 1);
      }
      out += '}';
      return;
    }
    default:
      out += to_str(v);
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.as_int());
    case Value::Kind::Float:
      return repr_float(v.as_double());
    case Value::Kind::Str:
      return v.as_str();
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::Dict:
      return repr(v);
    case Value::Kind::Generator:
      return "<generator object>";
    case Value::Kind::Object:
      return v.obj()->repr();
  }
  return "";
}

// ---- equality and order ------------------------------------------------------------------------

namespace {
bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth + 8)
    fail(ErrorKind::LimitExceeded, "values nest too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::Str:
      return a.as_str() == b.as_str();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.dict().items;
      if (x.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.dict().find(k);
        if (other == nullptr || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Generator:
      return a.list_data() == b.list_data();
    case Value::Kind::Object:
      return a.obj() == b.obj();
    default:
      return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth + 8)
    fail(ErrorKind::LimitExceeded, "values nest too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.as_str() < b.as_str();
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals_at(x[i], y[i], depth + 1)) return less_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  fail(ErrorKind::TypeError, "'<' not supported between instances of '" + a.type_name() +
                                 "' and '" + b.type_name() + "'");
}
}  // namespace

bool equals(const Value& a, const Value& b) {
  return equals_at(a, b, 0);
}
bool less(const Value& a, const Value& b) {
  return less_at(a, b, 0);
}

}  // namespace rkv::jinja
