// Python's text formatting as templates use it: json.dumps (transformers' tojson), str % args,
// str.format and format specs, int() and float() of strings, and slicing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/interp.h"
#include "jinja/unicode.h"

namespace rkv::jinja {

// ---- json.dumps --------------------------------------------------------------------------------

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    char buf[16];
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else if (ensure_ascii && cp >= 0x7F + 1) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                          static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          out.append(s, pos, len);
        }
    }
    pos += len;
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return repr_float(f);
}

[[noreturn]] void not_serializable(const Value& v) {
  fail(ErrorKind::TypeError, "Object of type " + v.type_name() + " is not JSON serializable");
}

void json_value(Interp& interp, std::string& out, const Value& v, const JsonOptions& o, int level) {
  interp.charge(1);
  interp.check_size(out.size());
  if (level > kMaxValueDepth + 8)
    fail(ErrorKind::LimitExceeded, "value nests too deeply for tojson");
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += o.indent_text;
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float:
      out += json_float(v.as_double());
      return;
    case Value::Kind::Str:
      json_string(out, v.as_str(), o.ensure_ascii);
      return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += o.item_separator;
        first = false;
        newline(level + 1);
        json_value(interp, out, item, o, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return less(a->first, b->first); });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += o.item_separator;
        first = false;
        newline(level + 1);
        const Value& k = kv->first;
        switch (k.kind()) {
          case Value::Kind::Str:
            json_string(out, k.as_str(), o.ensure_ascii);
            break;
          case Value::Kind::None:
            out += "\"null\"";
            break;
          case Value::Kind::Bool:
            out += k.as_bool() ? "\"true\"" : "\"false\"";
            break;
          case Value::Kind::Int:
            out += "\"" + std::to_string(k.as_int()) + "\"";
            break;
          case Value::Kind::Float:
            out += "\"" + json_float(k.as_double()) + "\"";
            break;
          default:
            fail(ErrorKind::TypeError,
                 "keys must be str, int, float, bool or None, not " + k.type_name());
        }
        out += o.key_separator;
        json_value(interp, out, kv->second, o, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      not_serializable(v);
  }
}

}  // namespace

std::string to_json(Interp& interp, const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(interp, out, v, options, 0);
  interp.check_size(out.size());
  return out;
}

// ---- numbers from strings ----------------------------------------------------------------------

bool parse_int(std::string_view s, int base, std::int64_t& out) {
  std::string_view t = unicode::strip(s, nullptr, true, true);
  bool neg = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    t.remove_prefix(1);
  }
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (t.size() >= 2 && t[0] == '0') {
      const char p = static_cast<char>(t[1] | 0x20);
      const int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb != 0 && (base == 0 || base == pb)) {
        base = pb;
        t.remove_prefix(2);
        if (!t.empty() && t[0] == '_') t.remove_prefix(1);
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36 || t.empty()) return false;
  std::uint64_t value = 0;
  bool prev_digit = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == t.size()) return false;
      prev_digit = false;
      continue;
    }
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z')
      d = c - 'A' + 10;
    else
      return false;
    if (d >= base) return false;
    if (value > (static_cast<std::uint64_t>(INT64_MAX) - static_cast<std::uint64_t>(d)) /
                    static_cast<std::uint64_t>(base))
      return false;
    value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
    prev_digit = true;
  }
  out = neg ? -static_cast<std::int64_t>(value) : static_cast<std::int64_t>(value);
  return true;
}

bool parse_float(std::string_view s, double& out) {
  std::string_view t = unicode::strip(s, nullptr, true, true);
  std::string clean;
  bool prev_digit = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == t.size() || !std::isdigit(static_cast<unsigned char>(t[i + 1])))
        return false;
      continue;
    }
    prev_digit = std::isdigit(static_cast<unsigned char>(c)) != 0;
    clean += c;
  }
  if (clean.empty()) return false;
  std::string lower;
  for (char c : clean) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : (lower[0] == '-' ? -HUGE_VAL : HUGE_VAL);
    return true;
  }
  // Only digits, one '.', one exponent: strtod accepts more (hex, "infinity" prefixes).
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-'))
      return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

// ---- format specs ------------------------------------------------------------------------------

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;
  char sign = 0;
  bool alternate = false;
  bool zero = false;
  std::int64_t width = -1;
  char grouping = 0;
  std::int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(std::string_view spec) {
  Spec s;
  std::size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (!spec.empty()) {
    std::size_t len = 1;
    unicode::decode(spec, 0, len);
    if (len < spec.size() && is_align(spec[len])) {
      s.fill = std::string(spec.substr(0, len));
      s.align = spec[len];
      i = len + 1;
    } else if (is_align(spec[0])) {
      s.align = spec[0];
      i = 1;
    }
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == '#') s.alternate = true, ++i;
  if (i < spec.size() && spec[i] == '0') s.zero = true, ++i;
  auto number = [&]() {
    std::int64_t n = -1;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
      n = (n < 0 ? 0 : n) * 10 + (spec[i++] - '0');
      if (n > 100000) fail(ErrorKind::LimitExceeded, "format width too large");
    }
    return n;
  };
  s.width = number();
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    s.precision = number();
    if (s.precision < 0) fail(ErrorKind::ValueError, "Format specifier missing precision");
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i != spec.size()) fail(ErrorKind::ValueError, "Invalid format specifier");
  return s;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += sep;
    out += digits[i];
  }
  return out;
}

std::string pad(const std::string& body, const std::string& sign, const Spec& s,
                char default_align) {
  const auto len = static_cast<std::int64_t>(unicode::length(body) + sign.size());
  if (s.width <= len) return sign + body;
  const auto marg = static_cast<std::size_t>(s.width - len);
  char align = s.align ? s.align : default_align;
  std::string fill = s.fill;
  if (s.zero && !s.align) {
    align = '=';
    fill = "0";
  }
  auto rep = [&](std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < n; ++i) out += fill;
    return out;
  };
  switch (align) {
    case '<':
      return sign + body + rep(marg);
    case '^':
      return rep(marg / 2) + sign + body + rep(marg - marg / 2);
    case '=':
      return sign + rep(marg) + body;
    default:
      return rep(marg) + sign + body;
  }
}

std::string format_float_body(double d, const Spec& s, char type) {
  std::int64_t prec = s.precision < 0 ? 6 : s.precision;
  if (prec > 300) fail(ErrorKind::LimitExceeded, "format precision too large");
  char buf[512];
  std::string fmt = "%";
  if (s.alternate) fmt += '#';
  fmt += ".*";
  fmt += type;
  std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<int>(prec), d);
  return buf;
}

}  // namespace

std::string format_spec(const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return to_str(v);
  const Spec s = parse_spec(spec_text);
  if (v.is_str() || v.is_none() || v.is_undefined() || v.is_sequence() || v.is_dict()) {
    if (!v.is_str())
      fail(ErrorKind::TypeError,
           "unsupported format string passed to " + v.type_name() + ".__format__");
    if (s.type != 0 && s.type != 's')
      fail(ErrorKind::ValueError,
           std::string("Unknown format code '") + s.type + "' for object of type 'str'");
    std::string body = v.as_str();
    if (s.precision >= 0) {
      const std::vector<std::size_t> off = unicode::offsets(body);
      if (static_cast<std::size_t>(s.precision) + 1 < off.size())
        body = body.substr(0, off[static_cast<std::size_t>(s.precision)]);
    }
    return pad(body, "", s, '<');
  }
  if (!v.is_number())
    fail(ErrorKind::TypeError,
         "unsupported format string passed to " + v.type_name() + ".__format__");
  char type = s.type;
  const bool integral =
      v.is_integral() && (type == 0 || type == 'd' || type == 'b' || type == 'o' || type == 'x' ||
                          type == 'X' || type == 'c' || type == 'n');
  if (v.is_float() &&
      (type == 'd' || type == 'b' || type == 'o' || type == 'x' || type == 'X' || type == 'c'))
    fail(ErrorKind::ValueError,
         std::string("Unknown format code '") + type + "' for object of type 'float'");
  std::string sign, body;
  if (integral) {
    const std::int64_t i = v.as_int();
    const std::uint64_t mag = i < 0 ? static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(i)
                                    : static_cast<std::uint64_t>(i);
    if (i < 0)
      sign = "-";
    else if (s.sign == '+')
      sign = "+";
    else if (s.sign == ' ')
      sign = " ";
    if (type == 'c') {
      unicode::append(body, static_cast<char32_t>(mag));
      return pad(body, "", s, '<');
    }
    const int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
    std::uint64_t m = mag;
    do {
      const int d = static_cast<int>(m % static_cast<std::uint64_t>(base));
      body += static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10);
      m /= static_cast<std::uint64_t>(base);
    } while (m > 0);
    std::reverse(body.begin(), body.end());
    if (s.grouping) body = group_digits(body, s.grouping);
    if (s.alternate && base != 10)
      sign += base == 2 ? "0b" : base == 8 ? "0o" : (type == 'X' ? "0X" : "0x");
    return pad(body, sign, s, '>');
  }
  double d = v.as_double();
  if (std::signbit(d) && !std::isnan(d)) {
    sign = "-";
    d = -d;
  } else if (s.sign == '+') {
    sign = "+";
  } else if (s.sign == ' ') {
    sign = " ";
  }
  if (type == 0 && s.precision < 0) {
    body = v.is_float() ? repr_float(d) : std::to_string(static_cast<std::int64_t>(d));
  } else if (type == '%') {
    body = format_float_body(d * 100, s, 'f') + "%";
  } else {
    char t = type == 0 ? 'g' : type == 'n' ? 'g' : type;
    if (t != 'f' && t != 'F' && t != 'e' && t != 'E' && t != 'g' && t != 'G')
      fail(ErrorKind::ValueError,
           std::string("Unknown format code '") + type + "' for object of type 'float'");
    body = format_float_body(d, s, t);
    if (std::isinf(d)) body = (t >= 'a') ? "inf" : "INF";
    if (std::isnan(d)) body = (t >= 'a') ? "nan" : "NAN";
  }
  if (s.grouping && !body.empty()) {
    const std::size_t dot = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, dot), s.grouping) +
           (dot == std::string::npos ? "" : body.substr(dot));
  }
  return pad(body, sign, s, '>');
}

// ---- str % args --------------------------------------------------------------------------------

std::string percent_format(Interp& interp, const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const bool mapping = args.is_dict();
  if (args.is_tuple())
    positional = args.items();
  else
    positional.push_back(args);
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++i >= format.size()) fail(ErrorKind::ValueError, "incomplete format");
    Value value;
    bool have_value = false;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string::npos) fail(ErrorKind::ValueError, "incomplete format key");
      if (!mapping) fail(ErrorKind::TypeError, "format requires a mapping");
      const std::string key = format.substr(i + 1, close - i - 1);
      const Value* v = args.dict().find(std::string_view(key));
      if (v == nullptr) fail(ErrorKind::ValueError, "KeyError: '" + key + "'");
      value = *v;
      have_value = true;
      used_mapping = true;
      i = close + 1;
    }
    Spec s;
    for (; i < format.size(); ++i) {
      const char f = format[i];
      if (f == '-')
        s.align = '<';
      else if (f == '+')
        s.sign = '+';
      else if (f == ' ') {
        if (s.sign != '+') s.sign = ' ';
      } else if (f == '#')
        s.alternate = true;
      else if (f == '0')
        s.zero = true;
      else
        break;
    }
    auto take = [&]() -> Value {
      if (next >= positional.size())
        fail(ErrorKind::TypeError, "not enough arguments for format string");
      return positional[next++];
    };
    auto read_number = [&]() {
      std::int64_t n = -1;
      if (i < format.size() && format[i] == '*') {
        ++i;
        const Value w = take();
        if (!w.is_integral()) fail(ErrorKind::TypeError, "* wants int");
        return std::min<std::int64_t>(w.as_int(), 100000);
      }
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        n = (n < 0 ? 0 : n) * 10 + (format[i++] - '0');
        if (n > 100000) fail(ErrorKind::LimitExceeded, "format width too large");
      }
      return n;
    };
    s.width = read_number();
    if (i < format.size() && format[i] == '.') {
      ++i;
      s.precision = std::max<std::int64_t>(0, read_number());
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) fail(ErrorKind::ValueError, "incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have_value) value = take();
    std::string text;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        text = type == 's' ? to_str(value) : repr(value);
        if (s.precision >= 0) {
          const std::vector<std::size_t> off = unicode::offsets(text);
          if (static_cast<std::size_t>(s.precision) + 1 < off.size())
            text = text.substr(0, off[static_cast<std::size_t>(s.precision)]);
        }
        const auto len = static_cast<std::int64_t>(unicode::length(text));
        if (s.width > len) {
          const std::string padding(static_cast<std::size_t>(s.width - len), ' ');
          text = s.align == '<' ? text + padding : padding + text;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        Value n = value;
        if (n.is_float()) {
          if (type == 'c' || type == 'x' || type == 'X' || type == 'o')
            fail(ErrorKind::TypeError,
                 std::string("%") + type + " format: an integer is required, not float");
          const double d = n.as_double();
          if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18)
            fail(ErrorKind::ValueError, "cannot convert float to integer");
          n = Value::integer(static_cast<std::int64_t>(d));
        }
        if (!n.is_integral())
          fail(ErrorKind::TypeError, std::string("%") + type +
                                         " format: a real number is required, not " +
                                         value.type_name());
        std::string spec;
        if (s.align == '<') spec += '<';
        if (s.sign) spec += s.sign;
        if (s.alternate && type != 'c') spec += '#';
        if (s.zero && s.align != '<') spec += '0';
        if (s.width >= 0) spec += std::to_string(s.width);
        spec += (type == 'i' || type == 'u') ? 'd' : type;
        text = format_spec(Value::integer(n.as_int()), spec);
        if (s.precision > 0 && type != 'c') {
          // %.3d pads the digits with zeros.
          std::string digits =
              format_spec(Value::integer(n.as_int() < 0 ? -n.as_int() : n.as_int()),
                          std::string(1, (type == 'i' || type == 'u') ? 'd' : type));
          if (static_cast<std::int64_t>(digits.size()) < s.precision)
            digits =
                std::string(static_cast<std::size_t>(s.precision) - digits.size(), '0') + digits;
          std::string sg = n.as_int() < 0 ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
          text = sg + digits;
          const auto len = static_cast<std::int64_t>(text.size());
          if (s.width > len) {
            const std::string padding(static_cast<std::size_t>(s.width - len), ' ');
            text = s.align == '<' ? text + padding : padding + text;
          }
        }
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!value.is_number())
          fail(ErrorKind::TypeError, "must be real number, not " + value.type_name());
        std::string spec;
        if (s.align == '<') spec += '<';
        if (s.sign) spec += s.sign;
        if (s.alternate) spec += '#';
        if (s.zero && s.align != '<') spec += '0';
        if (s.width >= 0) spec += std::to_string(s.width);
        spec += "." + std::to_string(s.precision < 0 ? 6 : s.precision);
        spec += type;
        text = format_spec(Value::floating(value.as_double()), spec);
        break;
      }
      default:
        fail(ErrorKind::ValueError, std::string("unsupported format character '") + type + "'");
    }
    out += text;
    interp.check_size(out.size());
  }
  if (!mapping && next < positional.size() && !used_mapping)
    fail(ErrorKind::TypeError, "not all arguments converted during string formatting");
  interp.charge(out.size() / 16);
  return out;
}

// ---- str.format --------------------------------------------------------------------------------

std::string str_format(Interp& interp, const std::string& format, const CallArgs& args) {
  std::string out;
  int auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fail(ErrorKind::ValueError, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // The field up to its matching '}' (a spec may hold nested {} pairs).
    std::size_t j = i + 1;
    int nest = 1;
    while (j < format.size()) {
      if (format[j] == '{') ++nest;
      if (format[j] == '}' && --nest == 0) break;
      ++j;
    }
    if (j >= format.size()) fail(ErrorKind::ValueError, "expected '}' before end of string");
    const std::string field = format.substr(i + 1, j - i - 1);
    i = j;
    std::size_t colon = std::string::npos, bang = std::string::npos;
    for (std::size_t k = 0; k < field.size(); ++k) {
      if (field[k] == '[') {
        const std::size_t close = field.find(']', k);
        if (close == std::string::npos) break;
        k = close;
        continue;
      }
      if (field[k] == '!' && bang == std::string::npos && colon == std::string::npos) bang = k;
      if (field[k] == ':') {
        colon = k;
        break;
      }
    }
    const std::string name = field.substr(0, std::min(bang, colon));
    std::string conversion;
    if (bang != std::string::npos)
      conversion =
          field.substr(bang + 1, (colon == std::string::npos ? field.size() : colon) - bang - 1);
    std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    if (spec.find('{') != std::string::npos) {
      CallArgs copy = args;
      spec = str_format(interp, spec, copy);
    }
    // The first part of the name: an index, a keyword or nothing (the next index).
    std::size_t end = name.find_first_of(".[");
    const std::string head = name.substr(0, end);
    Value v;
    if (head.empty()) {
      if (used_manual)
        fail(ErrorKind::ValueError,
             "cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (static_cast<std::size_t>(auto_index) >= args.positional.size())
        fail(ErrorKind::ValueError, "Replacement index " + std::to_string(auto_index) +
                                        " out of range for positional args tuple");
      v = args.positional[static_cast<std::size_t>(auto_index++)];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) {
                 return std::isdigit(static_cast<unsigned char>(ch)) != 0;
               })) {
      if (used_auto)
        fail(ErrorKind::ValueError,
             "cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      std::int64_t idx = 0;
      if (!parse_int(head, 10, idx) || idx < 0 ||
          static_cast<std::size_t>(idx) >= args.positional.size())
        fail(ErrorKind::ValueError,
             "Replacement index " + head + " out of range for positional args tuple");
      v = args.positional[static_cast<std::size_t>(idx)];
    } else {
      bool found = false;
      for (const auto& [k, val] : args.keyword) {
        if (k == head) {
          v = val;
          found = true;
        }
      }
      if (!found) fail(ErrorKind::ValueError, "KeyError: '" + head + "'");
    }
    while (end != std::string::npos && end < name.size()) {
      if (name[end] == '.') {
        const std::size_t next = name.find_first_of(".[", end + 1);
        v = interp.getattr(v, name.substr(end + 1, next == std::string::npos ? std::string::npos
                                                                             : next - end - 1));
        end = next;
      } else {
        const std::size_t close = name.find(']', end);
        if (close == std::string::npos) fail(ErrorKind::ValueError, "Missing ']' in format string");
        const std::string key = name.substr(end + 1, close - end - 1);
        std::int64_t idx = 0;
        if (!key.empty() &&
            std::all_of(
                key.begin(), key.end(),
                [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; }) &&
            parse_int(key, 10, idx))
          v = interp.getitem(v, Value::integer(idx));
        else
          v = interp.getitem(v, Value::str(key));
        end = close + 1;
      }
    }
    if (conversion == "r" || conversion == "a")
      v = Value::str(repr(v));
    else if (conversion == "s")
      v = Value::str(to_str(v));
    else if (!conversion.empty())
      fail(ErrorKind::ValueError, "Unknown conversion specifier " + conversion);
    out += format_spec(v, spec);
    interp.check_size(out.size());
  }
  interp.charge(out.size() / 16);
  return out;
}

// ---- slicing -----------------------------------------------------------------------------------

Value slice_value(Interp* interp, const Value& v, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  auto index_of = [](const Value& x) {
    if (!x.is_none() && !x.is_integral())
      fail(ErrorKind::TypeError,
           "slice indices must be integers or None or have an __index__ method");
  };
  index_of(start_v);
  index_of(stop_v);
  index_of(step_v);
  const std::int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) fail(ErrorKind::ValueError, "slice step cannot be zero");
  if (!v.is_str() && !v.is_list() && !v.is_tuple()) {
    return Value::undefined(v.object_type_repr() + " has no element slice(" + repr(start_v) + ", " +
                            repr(stop_v) + ", " + repr(step_v) + ")");
  }
  const std::vector<std::size_t> off =
      v.is_str() ? unicode::offsets(v.as_str()) : std::vector<std::size_t>{};
  const std::int64_t n = v.is_str() ? static_cast<std::int64_t>(off.size() - 1)
                                    : static_cast<std::int64_t>(v.items().size());
  auto adjust = [&](const Value& x, std::int64_t def) {
    if (x.is_none()) return def;
    std::int64_t i = x.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  const std::int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  if (interp != nullptr) interp->charge(static_cast<std::uint64_t>(n / 16 + 1));
  if (v.is_str()) {
    const std::string& s = v.as_str();
    if (step == 1) {
      if (stop <= start) return Value::str("");
      return Value::str(
          s.substr(off[static_cast<std::size_t>(start)],
                   off[static_cast<std::size_t>(stop)] - off[static_cast<std::size_t>(start)]));
    }
    std::string out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      const auto k = static_cast<std::size_t>(i);
      out.append(s, off[k], off[k + 1] - off[k]);
    }
    return Value::str(out);
  }
  std::vector<Value> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(v.items()[static_cast<std::size_t>(i)]);
  return v.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

}  // namespace rkv::jinja
