// Jinja2's built-in filters, tests and globals (jinja2/filters.py, tests.py, defaults.py) as the
// sandbox exposes them, with transformers' tojson, raise_exception and strftime_now.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "jinja/interp.h"
#include "jinja/unicode.h"

namespace rkv::jinja {

namespace {

using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);

std::int64_t to_index(const Value& v, const char* what) {
  if (!v.is_integral())
    fail(ErrorKind::TypeError,
         "'" + v.type_name() + "' object cannot be interpreted as an integer (" + what + ")");
  return v.as_int();
}

std::size_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Str:
      return unicode::length(v.as_str());
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return v.items().size();
    case Value::Kind::Dict:
      return v.dict().items.size();
    case Value::Kind::Undefined:
      return 0;
    default:
      fail(ErrorKind::TypeError, "object of type '" + v.type_name() + "' has no len()");
  }
}

Value ignore_case(const Value& v) {
  return v.is_str() ? Value::str(unicode::lower(v.as_str())) : v;
}

// make_attrgetter: "a.b.0" looked up item by item with the sandbox's getitem.
Value get_attribute(Interp& interp, const Value& item, const Value& attribute,
                    const Value& def = {}) {
  if (!attribute.is_str()) {
    Value r = interp.getitem(item, attribute);
    return r.is_undefined() && !def.is_undefined() ? def : r;
  }
  Value cur = item;
  const std::string& path = attribute.as_str();
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    std::int64_t index = 0;
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        parse_int(part, 10, index))
      cur = interp.getitem(cur, Value::integer(index));
    else
      cur = interp.getitem(cur, Value::str(part));
    if (cur.is_undefined() && !def.is_undefined()) cur = def;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value python_add(Interp& interp, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value::floating(a.as_double() + b.as_double());
    std::int64_t r;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r))
      fail(ErrorKind::LimitExceeded, "integer result does not fit in 64 bits");
    return Value::integer(r);
  }
  if (a.is_list() && b.is_list()) {
    std::vector<Value> items = a.items();
    interp.charge(items.size() + b.items().size());
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(items));
  }
  fail(ErrorKind::TypeError,
       "unsupported operand type(s) for +: '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

std::string py_center(const std::string& s, std::int64_t width) {
  const auto len = static_cast<std::int64_t>(unicode::length(s));
  if (width <= len) return s;
  const std::int64_t marg = width - len;
  const std::int64_t left = marg / 2 + (marg & width & 1);
  return std::string(static_cast<std::size_t>(left), ' ') + s +
         std::string(static_cast<std::size_t>(marg - left), ' ');
}

// ---- filters -----------------------------------------------------------------------------------

Value f_abs(Interp&, const Value& v, Args& a) {
  a.done(0);
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) fail(ErrorKind::LimitExceeded, "integer overflow");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  fail(ErrorKind::TypeError, "bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interp& interp, const Value& v, Args& a) {
  const Value name = a.get(0, "name");
  a.done(1);
  const std::string n = to_str(name);
  if (v.is_object()) return interp.getattr(v, n);
  Value m = method_of(v, n);
  if (!m.is_undefined() || m.undefined_info().kind == ErrorKind::SecurityError) return m;
  return Value::undefined("'" + v.object_type_repr() + "' has no attribute '" + n + "'");
}

Value f_batch(Interp& interp, const Value& v, Args& a) {
  const std::int64_t count = to_index(a.get(0, "linecount"), "linecount");
  const Value fill = a.get(1, "fill_with", Value::none());
  a.done(2);
  if (count <= 0) fail(ErrorKind::ValueError, "batch size must be positive");
  std::vector<Value> out, tmp;
  for (Value& item : interp.iterate(v)) {
    if (static_cast<std::int64_t>(tmp.size()) == count) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (!fill.is_none())
      while (static_cast<std::int64_t>(tmp.size()) < count) tmp.push_back(fill);
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::generator(std::move(out));
}

Value f_capitalize(Interp&, const Value& v, Args& a) {
  a.done(0);
  const std::string s = to_str(v);
  std::string out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    unicode::append(out, pos == 0 ? unicode::to_title(cp) : unicode::to_lower(cp));
    pos += len;
  }
  return Value::str(out);
}

Value f_center(Interp& interp, const Value& v, Args& a) {
  const std::int64_t width = to_index(a.get(0, "width", Value::integer(80)), "width");
  a.done(1);
  interp.check_size(static_cast<std::size_t>(std::max<std::int64_t>(0, width)));
  return Value::str(py_center(to_str(v), width));
}

Value f_default(Interp&, const Value& v, Args& a) {
  const Value def = a.get(0, "default_value", Value::str(""));
  const bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
  a.done(2);
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value f_dictsort(Interp&, const Value& v, Args& a) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value by = a.get(1, "by", Value::str("key"));
  const bool reverse = truthy(a.get(2, "reverse", Value::boolean(false)));
  a.done(3);
  std::size_t pos = 0;
  if (by.is_str() && by.as_str() == "value")
    pos = 1;
  else if (!by.is_str() || by.as_str() != "key")
    fail(ErrorKind::TemplateRuntimeError, "You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict())
    fail(ErrorKind::UndefinedError, "'" + v.object_type_repr() + "' has no attribute 'items'");
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict().items) items.push_back(Value::tuple({k, val}));
  auto key = [&](const Value& t) {
    const Value& x = t.items()[pos];
    return case_sensitive ? x : ignore_case(x);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_escape(Interp&, const Value& v, Args& a) {
  a.done(0);
  if (v.is_markup()) return v;
  return Value::markup(html_escape(to_str(v)));
}

Value f_forceescape(Interp&, const Value& v, Args& a) {
  a.done(0);
  return Value::markup(html_escape(to_str(v)));
}

Value f_first(Interp& interp, const Value& v, Args& a) {
  a.done(0);
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interp& interp, const Value& v, Args& a) {
  a.done(0);
  if (v.is_generator()) fail(ErrorKind::TypeError, "'generator' object is not reversible");
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(Interp&, const Value& v, Args& a) {
  const Value def = a.get(0, "default", Value::floating(0.0));
  a.done(1);
  if (v.is_number()) return Value::floating(v.as_double());
  double d = 0;
  if (v.is_str() && parse_float(v.as_str(), d)) return Value::floating(d);
  return def;
}

Value f_format(Interp& interp, const Value& v, Args& a) {
  const CallArgs& raw = a.raw();
  if (!raw.keyword.empty() && !raw.positional.empty())
    fail(ErrorKind::TemplateRuntimeError,
         "can't handle positional and keyword arguments at the same time");
  if (!raw.keyword.empty()) {
    DictData d;
    for (const auto& [k, val] : raw.keyword) d.set(Value::str(k), val);
    return Value::str(percent_format(interp, to_str(v), Value::dict(std::move(d))));
  }
  return Value::str(percent_format(interp, to_str(v), Value::tuple(raw.positional)));
}

Value f_groupby(Interp& interp, const Value& v, Args& a) {
  const Value attribute = a.get(0, "attribute");
  const Value def = a.get(1, "default", Value::none());
  const bool case_sensitive = truthy(a.get(2, "case_sensitive", Value::boolean(false)));
  a.done(3);
  std::vector<Value> items = interp.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value k = get_attribute(interp, item, attribute, def.is_none() ? Value() : def);
    if (!case_sensitive) k = ignore_case(k);
    keyed.emplace_back(std::move(k), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& x, const auto& y) { return less(x.first, y.first); });
  std::vector<Value> out;
  for (std::size_t i = 0; i < keyed.size();) {
    std::vector<Value> group;
    std::size_t j = i;
    while (j < keyed.size() && equals(keyed[j].first, keyed[i].first))
      group.push_back(keyed[j++].second);
    Value grouper = keyed[i].first;
    if (!case_sensitive)
      grouper = get_attribute(interp, group.front(), attribute, def.is_none() ? Value() : def);
    out.push_back(Value::tuple({grouper, Value::list(std::move(group))}));
    i = j;
  }
  return Value::list(std::move(out));
}

// Python's str.splitlines() (without the line ends).
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::size_t pos = 0, start = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (unicode::is_line_break(cp)) {
      lines.push_back(s.substr(start, pos - start));
      pos += len;
      if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
      start = pos;
    } else {
      pos += len;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Value f_indent(Interp& interp, const Value& v, Args& a) {
  const Value width = a.get(0, "width", Value::integer(4));
  const bool first = truthy(a.get(1, "first", Value::boolean(false)));
  const bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
  a.done(3);
  std::string indention;
  if (width.is_str()) {
    indention = width.as_str();
  } else {
    const std::int64_t w = to_index(width, "width");
    interp.check_size(static_cast<std::size_t>(std::max<std::int64_t>(0, w)));
    indention.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, w)), ' ');
  }
  const std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = split_lines(s);
  interp.charge(lines.size() * (indention.size() / 16 + 1));
  interp.check_size(s.size() + lines.size() * indention.size());
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (std::size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += indention;
        rv += lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return Value::str(rv);
}

Value f_int(Interp&, const Value& v, Args& a) {
  const Value def = a.get(0, "default", Value::integer(0));
  const Value base = a.get(1, "base", Value::integer(10));
  a.done(2);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) return def;
    return Value::integer(static_cast<std::int64_t>(d));
  }
  if (v.is_str()) {
    std::int64_t i = 0;
    if (parse_int(v.as_str(), base.is_integral() ? static_cast<int>(base.as_int()) : 10, i))
      return Value::integer(i);
    double d = 0;
    if (parse_float(v.as_str(), d) && !std::isnan(d) && !std::isinf(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<std::int64_t>(d));
  }
  return def;
}

Value f_items(Interp&, const Value& v, Args& a) {
  a.done(0);
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) fail(ErrorKind::TypeError, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::tuple({k, val}));
  return Value::generator(std::move(out));
}

Value f_join(Interp& interp, const Value& v, Args& a) {
  const Value sep = a.get(0, "d", Value::str(""));
  const Value attribute = a.get(1, "attribute", Value::none());
  a.done(2);
  const std::string d = to_str(sep);
  std::string out;
  bool first = true;
  for (const Value& item : interp.iterate(v)) {
    if (!first) out += d;
    first = false;
    out += to_str(attribute.is_none() ? item : get_attribute(interp, item, attribute));
    interp.check_size(out.size());
  }
  interp.charge(out.size() / 16);
  return Value::str(out);
}

Value f_length(Interp&, const Value& v, Args& a) {
  a.done(0);
  return Value::integer(static_cast<std::int64_t>(py_len(v)));
}

Value f_list(Interp& interp, const Value& v, Args& a) {
  a.done(0);
  return Value::list(interp.iterate(v));
}

Value f_lower(Interp&, const Value& v, Args& a) {
  a.done(0);
  return Value::str(unicode::lower(to_str(v)));
}

Value f_upper(Interp&, const Value& v, Args& a) {
  a.done(0);
  return Value::str(unicode::upper(to_str(v)));
}

Value f_map(Interp& interp, const Value& v, Args& a) {
  const CallArgs& raw = a.raw();
  std::vector<Value> out;
  std::vector<Value> items = truthy(v) ? interp.iterate(v) : std::vector<Value>{};
  if (raw.positional.empty()) {
    Value attribute, def = Value::none();
    for (const auto& [k, val] : raw.keyword) {
      if (k == "attribute")
        attribute = val;
      else if (k == "default")
        def = val;
      else
        fail(ErrorKind::TemplateRuntimeError, "Unexpected keyword argument '" + k + "'");
    }
    if (attribute.is_undefined())
      fail(ErrorKind::TemplateRuntimeError, "map requires a filter argument");
    for (const Value& item : items)
      out.push_back(get_attribute(interp, item, attribute, def.is_none() ? Value() : def));
    return Value::generator(std::move(out));
  }
  const std::string name = to_str(raw.positional[0]);
  for (const Value& item : items) {
    CallArgs args;
    args.positional.assign(raw.positional.begin() + 1, raw.positional.end());
    args.keyword = raw.keyword;
    out.push_back(interp.filter(name, item, args));
  }
  return Value::generator(std::move(out));
}

Value min_max(Interp& interp, const Value& v, Args& a, bool max) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value attribute = a.get(1, "attribute", Value::none());
  a.done(2);
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attribute.is_none() ? x : get_attribute(interp, x, attribute);
    return case_sensitive ? k : ignore_case(k);
  };
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_max(Interp& interp, const Value& v, Args& a) {
  return min_max(interp, v, a, true);
}
Value f_min(Interp& interp, const Value& v, Args& a) {
  return min_max(interp, v, a, false);
}

Value f_pprint(Interp&, const Value& v, Args& a) {
  a.done(0);
  return Value::str(repr(v));
}

Value select_or_reject(Interp& interp, const Value& v, Args& a, bool select, bool attr) {
  const CallArgs& raw = a.raw();
  std::size_t next = 0;
  Value attribute;
  if (attr) {
    if (raw.positional.empty()) fail(ErrorKind::TypeError, "missing attribute argument");
    attribute = raw.positional[next++];
  }
  std::string test_name;
  const bool has_test = next < raw.positional.size();
  if (has_test) test_name = to_str(raw.positional[next++]);
  std::vector<Value> out;
  if (!truthy(v)) return Value::generator({});
  for (Value& item : interp.iterate(v)) {
    const Value subject = attr ? get_attribute(interp, item, attribute) : item;
    bool r;
    if (has_test) {
      CallArgs args;
      args.positional.assign(raw.positional.begin() + static_cast<std::ptrdiff_t>(next),
                             raw.positional.end());
      args.keyword = raw.keyword;
      r = interp.test(test_name, subject, args);
    } else {
      r = truthy(subject);
    }
    if (r == select) out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}
Value f_select(Interp& i, const Value& v, Args& a) {
  return select_or_reject(i, v, a, true, false);
}
Value f_reject(Interp& i, const Value& v, Args& a) {
  return select_or_reject(i, v, a, false, false);
}
Value f_selectattr(Interp& i, const Value& v, Args& a) {
  return select_or_reject(i, v, a, true, true);
}
Value f_rejectattr(Interp& i, const Value& v, Args& a) {
  return select_or_reject(i, v, a, false, true);
}

Value f_replace(Interp& interp, const Value& v, Args& a) {
  const Value old_v = a.get(0, "old");
  const Value new_v = a.get(1, "new");
  const Value count = a.get(2, "count", Value::none());
  a.done(3);
  CallArgs args;
  args.positional = {Value::str(to_str(old_v)), Value::str(to_str(new_v))};
  if (!count.is_none()) args.positional.push_back(count);
  return interp.call(method_of(Value::str(to_str(v)), "replace"), args);
}

Value f_reverse(Interp& interp, const Value& v, Args& a) {
  a.done(0);
  if (v.is_str()) {
    const std::vector<std::size_t> off = unicode::offsets(v.as_str());
    std::string out;
    for (std::size_t i = off.size() - 1; i > 0; --i)
      out.append(v.as_str(), off[i - 1], off[i] - off[i - 1]);
    return Value::str(out);
  }
  std::vector<Value> items = interp.iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_generator()) return Value::list(std::move(items));
  return Value::generator(std::move(items));
}

Value f_round(Interp&, const Value& v, Args& a) {
  const std::int64_t precision = to_index(a.get(0, "precision", Value::integer(0)), "precision");
  const Value method = a.get(1, "method", Value::str("common"));
  a.done(2);
  const std::string m = to_str(method);
  if (m != "common" && m != "ceil" && m != "floor")
    fail(ErrorKind::TemplateRuntimeError, "method must be common, ceil or floor");
  if (!v.is_number())
    fail(ErrorKind::TypeError, "type " + v.type_name() + " doesn't define __round__ method");
  if (m == "common") {
    if (v.is_integral() && precision >= 0) return Value::integer(v.as_int());
    const double d = v.as_double();
    if (std::isnan(d) || std::isinf(d) || precision > 300 || precision < -300)
      return Value::floating(d);
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), d);
      return Value::floating(std::strtod(buf, nullptr));
    }
    const double p = std::pow(10.0, static_cast<double>(-precision));
    return Value::floating(std::nearbyint(d / p) * p);
  }
  const double p = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * p;
  return Value::floating((m == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_markup() ? v : Value::markup(to_str(v));
}

Value f_slice(Interp& interp, const Value& v, Args& a) {
  const std::int64_t slices = to_index(a.get(0, "slices"), "slices");
  const Value fill = a.get(1, "fill_with", Value::none());
  a.done(2);
  if (slices <= 0) fail(ErrorKind::ValueError, "slices must be positive");
  std::vector<Value> seq = interp.iterate(v);
  const auto length = static_cast<std::int64_t>(seq.size());
  const std::int64_t per = length / slices, extra = length % slices;
  std::int64_t offset = 0;
  std::vector<Value> out;
  for (std::int64_t i = 0; i < slices; ++i) {
    const std::int64_t start = offset + i * per;
    if (i < extra) ++offset;
    const std::int64_t end = offset + (i + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && i >= extra) tmp.push_back(fill);
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::generator(std::move(out));
}

Value f_sort(Interp& interp, const Value& v, Args& a) {
  const bool reverse = truthy(a.get(0, "reverse", Value::boolean(false)));
  const bool case_sensitive = truthy(a.get(1, "case_sensitive", Value::boolean(false)));
  const Value attribute = a.get(2, "attribute", Value::none());
  a.done(3);
  std::vector<Value> items = interp.iterate(v);
  std::vector<std::string> attrs;
  if (attribute.is_str()) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = attribute.as_str().find(',', start);
      attrs.push_back(attribute.as_str().substr(
          start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value k;
    if (attribute.is_none()) {
      k = case_sensitive ? item : ignore_case(item);
    } else if (!attribute.is_str()) {
      k = get_attribute(interp, item, attribute);
      if (!case_sensitive) k = ignore_case(k);
    } else {
      std::vector<Value> parts;
      for (const std::string& part : attrs) {
        Value p = get_attribute(interp, item, Value::str(part));
        parts.push_back(case_sensitive ? p : ignore_case(p));
      }
      k = parts.size() == 1 ? parts[0] : Value::list(std::move(parts));
    }
    keyed.emplace_back(std::move(k), std::move(item));
  }
  interp.charge(keyed.size() * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value f_string(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str() ? v : Value::str(to_str(v));
}

Value f_striptags(Interp&, const Value& v, Args& a) {
  a.done(0);
  const std::string s = to_str(v);
  std::string text;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') {
      const std::size_t end = s.find('>', i);
      if (end != std::string::npos) {
        i = end;
        text += ' ';
        continue;
      }
    }
    text += s[i];
  }
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      space = !out.empty();
    } else {
      if (space) out += ' ';
      space = false;
      out += c;
    }
  }
  return Value::str(out);
}

Value f_sum(Interp& interp, const Value& v, Args& a) {
  const Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value::integer(0));
  a.done(2);
  for (const Value& item : interp.iterate(v))
    total = python_add(interp, total,
                       attribute.is_none() ? item : get_attribute(interp, item, attribute));
  return total;
}

Value f_title(Interp&, const Value& v, Args& a) {
  a.done(0);
  // Jinja2 splits at runs of '-', whitespace, '(', '{', '[', '<' and capitalises each piece.
  const std::string s = to_str(v);
  std::string out;
  bool word_start = true;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    const bool sep =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || unicode::is_space(cp);
    if (sep) {
      unicode::append(out, word_start && out.empty() ? unicode::to_upper(cp) : cp);
      word_start = true;
    } else {
      unicode::append(out, word_start ? unicode::to_upper(cp) : unicode::to_lower(cp));
      word_start = false;
    }
    pos += len;
  }
  return Value::str(out);
}

Value f_tojson(Interp& interp, const Value& v, Args& a) {
  const Value ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false));
  const Value indent = a.get(1, "indent", Value::none());
  const Value separators = a.get(2, "separators", Value::none());
  const Value sort_keys = a.get(3, "sort_keys", Value::boolean(false));
  a.done(4);
  JsonOptions o;
  o.ensure_ascii = truthy(ensure_ascii);
  o.sort_keys = truthy(sort_keys);
  if (!indent.is_none()) {
    o.indent = 0;
    if (indent.is_str()) {
      o.indent_text = indent.as_str();
    } else if (indent.is_integral()) {
      const std::int64_t n = indent.as_int();
      if (n > 1000) fail(ErrorKind::LimitExceeded, "tojson indent too large");
      o.indent_text.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
    } else {
      fail(ErrorKind::TypeError, "indent must be an int or a str");
    }
    o.item_separator = ",";
  }
  if (!separators.is_none()) {
    std::vector<Value> seps = interp.iterate(separators);
    if (seps.size() != 2 || !seps[0].is_str() || !seps[1].is_str())
      fail(ErrorKind::ValueError, "separators must be a (item_separator, key_separator) pair");
    o.item_separator = seps[0].as_str();
    o.key_separator = seps[1].as_str();
  }
  return Value::str(to_json(interp, v, o));
}

Value f_trim(Interp&, const Value& v, Args& a) {
  const Value chars = a.get(0, "chars", Value::none());
  a.done(1);
  const std::string s = to_str(v);
  const std::string c = chars.is_none() ? std::string() : to_str(chars);
  std::string r(unicode::strip(s, chars.is_none() ? nullptr : &c, true, true));
  return v.is_markup() ? Value::markup(std::move(r)) : Value::str(std::move(r));
}

Value f_truncate(Interp&, const Value& v, Args& a) {
  const std::int64_t length = to_index(a.get(0, "length", Value::integer(255)), "length");
  const bool killwords = truthy(a.get(1, "killwords", Value::boolean(false)));
  const std::string end = to_str(a.get(2, "end", Value::str("...")));
  const Value leeway_v = a.get(3, "leeway", Value::none());
  a.done(4);
  const std::int64_t leeway = leeway_v.is_none() ? 5 : to_index(leeway_v, "leeway");
  const std::string s = to_str(v);
  const std::vector<std::size_t> off = unicode::offsets(s);
  const auto n = static_cast<std::int64_t>(off.size() - 1);
  if (length < static_cast<std::int64_t>(unicode::length(end)))
    fail(ErrorKind::ValueError, "expected length >= " + std::to_string(unicode::length(end)));
  if (leeway < 0) fail(ErrorKind::ValueError, "expected leeway >= 0");
  if (n <= length + leeway) return Value::str(s);
  const auto keep =
      static_cast<std::size_t>(length - static_cast<std::int64_t>(unicode::length(end)));
  std::string head = s.substr(0, off[std::min<std::size_t>(keep, off.size() - 1)]);
  if (killwords) return Value::str(head + end);
  const std::size_t space = head.rfind(' ');
  if (space != std::string::npos) head = head.substr(0, space);
  return Value::str(head + end);
}

Value f_unique(Interp& interp, const Value& v, Args& a) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value attribute = a.get(1, "attribute", Value::none());
  a.done(2);
  std::vector<Value> seen, out;
  for (Value& item : interp.iterate(v)) {
    Value k = attribute.is_none() ? item : get_attribute(interp, item, attribute);
    if (!case_sensitive) k = ignore_case(k);
    bool dup = false;
    interp.charge(seen.size());
    for (const Value& s : seen)
      if (equals(s, k)) {
        dup = true;
        break;
      }
    if (!dup) {
      seen.push_back(std::move(k));
      out.push_back(std::move(item));
    }
  }
  return Value::generator(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, Args& a) {
  a.done(0);
  const std::string s = to_str(v);
  std::int64_t n = 0;
  bool in_word = false;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    const bool w = cp == '_' || unicode::is_alpha(cp) || unicode::is_numeric(cp);
    if (w && !in_word) ++n;
    in_word = w;
    pos += len;
  }
  return Value::integer(n);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_forceescape},
      {"format", f_format},     {"groupby", f_groupby},
      {"indent", f_indent},     {"int", f_int},
      {"items", f_items},       {"join", f_join},
      {"last", f_last},         {"length", f_length},
      {"list", f_list},         {"lower", f_lower},
      {"map", f_map},           {"max", f_max},
      {"min", f_min},           {"pprint", f_pprint},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"slice", f_slice},       {"sort", f_sort},
      {"string", f_string},     {"striptags", f_striptags},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests -------------------------------------------------------------------------------------

bool t_defined(Interp&, const Value& v, Args& a) {
  a.done(0);
  return !v.is_undefined();
}
bool t_undefined(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_undefined();
}
bool t_none(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_none();
}
bool t_boolean(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_bool();
}
bool t_false(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_bool() && !v.as_bool();
}
bool t_true(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_bool() && v.as_bool();
}
bool t_integer(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_int();
}
bool t_float(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_float();
}
bool t_number(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_number();
}
bool t_string(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str();
}
bool t_mapping(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_dict();
}
bool t_iterable(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str() || v.is_sequence() || v.is_dict() || v.is_generator() || v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_object() && v.obj()->callable();
}
bool t_sameas(Interp&, const Value& v, Args& a) {
  const Value other = a.get(0, "other");
  a.done(1);
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::None:
    case Value::Kind::Undefined:
      return true;
    case Value::Kind::Bool:
      return v.as_bool() == other.as_bool();
    case Value::Kind::Int:
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::Generator:
      return v.list_data() == other.list_data();
    case Value::Kind::Object:
      return v.obj() == other.obj();
    default:
      return false;
  }
}
bool t_escaped(Interp&, const Value&, Args& a) {
  a.done(0);
  return false;
}
bool t_lower(Interp&, const Value& v, Args& a) {
  a.done(0);
  const std::string s = to_str(v);
  return unicode::lower(s) == s && unicode::upper(s) != s;
}
bool t_upper(Interp&, const Value& v, Args& a) {
  a.done(0);
  const std::string s = to_str(v);
  return unicode::upper(s) == s && unicode::lower(s) != s;
}
std::int64_t int_operand(const Value& v) {
  if (v.is_undefined()) fail(v.undefined_info().kind, v.undefined_info().message);
  if (!v.is_integral())
    fail(ErrorKind::TypeError,
         "unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
  return v.as_int();
}
bool t_even(Interp&, const Value& v, Args& a) {
  a.done(0);
  if (v.is_float()) return std::fmod(v.as_double(), 2.0) == 0;
  return int_operand(v) % 2 == 0;
}
bool t_odd(Interp&, const Value& v, Args& a) {
  a.done(0);
  if (v.is_float()) return std::fmod(std::fabs(v.as_double()), 2.0) == 1;
  return int_operand(v) % 2 != 0;
}
bool t_divisibleby(Interp&, const Value& v, Args& a) {
  const Value num = a.get(0, "num");
  a.done(1);
  if (v.is_float() || num.is_float()) {
    if (num.as_double() == 0) fail(ErrorKind::ValueError, "float modulo");
    return std::fmod(v.as_double(), num.as_double()) == 0;
  }
  const std::int64_t d = int_operand(num);
  if (d == 0) fail(ErrorKind::ValueError, "integer division or modulo by zero");
  if (d == -1) return true;
  return int_operand(v) % d == 0;
}
bool t_eq(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  return equals(v, o);
}
bool t_ne(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  return !equals(v, o);
}
void check_ordered(const Value& x, const Value& y) {
  if (x.is_undefined()) fail(x.undefined_info().kind, x.undefined_info().message);
  if (y.is_undefined()) fail(y.undefined_info().kind, y.undefined_info().message);
}
bool t_lt(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  check_ordered(v, o);
  return less(v, o);
}
bool t_le(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  check_ordered(v, o);
  return less(v, o) || equals(v, o);
}
bool t_gt(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  check_ordered(v, o);
  return less(o, v);
}
bool t_ge(Interp&, const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  a.done(1);
  check_ordered(v, o);
  return less(o, v) || equals(v, o);
}
bool t_in(Interp& interp, const Value& v, Args& a) {
  const Value seq = a.get(0, "seq");
  a.done(1);
  switch (seq.kind()) {
    case Value::Kind::Str:
      if (!v.is_str())
        fail(ErrorKind::TypeError,
             "'in <string>' requires string as left operand, not " + v.type_name());
      return seq.as_str().find(v.as_str()) != std::string::npos;
    case Value::Kind::Dict:
      return seq.dict().find(v) != nullptr;
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::Generator:
      for (const Value& x : interp.iterate(seq))
        if (equals(x, v)) return true;
      return false;
    default:
      fail(ErrorKind::TypeError, "argument of type '" + seq.type_name() + "' is not iterable");
  }
}
bool t_filter(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str() && filters().count(v.as_str()) > 0;
}
bool t_test(Interp&, const Value& v, Args& a) {
  a.done(0);
  return v.is_str() && has_test(v.as_str());
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"!=", t_ne},
      {"<", t_lt},
      {"<=", t_le},
      {"==", t_eq},
      {">", t_gt},
      {">=", t_ge},
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {"greaterthan", t_gt},
      {"gt", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"lessthan", t_lt},
      {"lower", t_lower},
      {"lt", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

// ---- globals -----------------------------------------------------------------------------------

// The sandbox's limit on range() (jinja2.sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

Value g_range(Interp& interp, const Value&, CallArgs& args) {
  if (!args.keyword.empty()) fail(ErrorKind::TypeError, "range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    fail(ErrorKind::TypeError,
         "range expected at most 3 arguments, got " + std::to_string(p.size()));
  std::int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    stop = to_index(p[0], "range");
  } else {
    start = to_index(p[0], "range");
    stop = to_index(p[1], "range");
    if (p.size() == 3) step = to_index(p[2], "range");
  }
  if (step == 0) fail(ErrorKind::ValueError, "range() arg 3 must not be zero");
  // Lengths computed in long double so that extreme bounds cannot overflow.
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  long double n = step > 0 ? std::ceil(span / static_cast<long double>(step))
                           : std::ceil(span / static_cast<long double>(step));
  if (n < 0) n = 0;
  if (n > kMaxRange)
    fail(ErrorKind::LimitExceeded,
         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  const auto count = static_cast<std::int64_t>(n);
  interp.charge(static_cast<std::uint64_t>(count));
  std::vector<Value> items;
  items.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

Value g_dict(Interp& interp, const Value&, CallArgs& args) {
  DictData d;
  if (args.positional.size() > 1)
    fail(ErrorKind::TypeError,
         "dict expected at most 1 argument, got " + std::to_string(args.positional.size()));
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const Value& pair : interp.iterate(src)) {
        std::vector<Value> kv = interp.iterate(pair);
        if (kv.size() != 2)
          fail(ErrorKind::ValueError, "dictionary update sequence element has length " +
                                          std::to_string(kv.size()) + "; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::str(k), v);
  return Value::dict(std::move(d));
}

Value g_namespace(Interp& interp, const Value& self, CallArgs& args) {
  const Value init = g_dict(interp, self, args);
  Value ns = interp.make_namespace();
  static_cast<Namespace*>(ns.obj().get())->attrs = init.dict();
  return ns;
}

Value g_raise_exception(Interp&, const Value&, CallArgs& args) {
  const std::string message = args.positional.empty() ? "" : to_str(args.positional[0]);
  fail(ErrorKind::TemplateError, message);
}

Value g_strftime_now(Interp& interp, const Value&, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_str())
    fail(ErrorKind::TypeError, "strftime_now() takes one format string");
  std::tm tm{};
  if (interp.options().now) {
    tm = *interp.options().now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  const std::string& fmt = args.positional[0].as_str();
  if (fmt.size() > 4096) fail(ErrorKind::LimitExceeded, "strftime format too long");
  if (fmt.empty()) return Value::str("");
  std::vector<char> buf(fmt.size() * 64 + 256);
  const std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  return Value::str(std::string(buf.data(), n));
}

// cycler(*items) and joiner(sep).
class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {
    for (const Value& v : items_) depth_ = std::max(depth_, v.depth() + 1);
    if (depth_ > kMaxValueDepth) fail(ErrorKind::LimitExceeded, "values nest too deeply");
  }
  std::string type_name() const override { return "Cycler"; }
  int depth() const override { return depth_; }
  Value getattr(const Value& self, const std::string& name) const override {
    if (name == "current") return items_.empty() ? Value::none() : items_[pos_];
    if (name == "next" || name == "__next__")
      return Value::object(std::make_shared<Function>("next", &next, self));
    if (name == "reset") return Value::object(std::make_shared<Function>("reset", &reset, self));
    return Object::getattr(self, name);
  }

 private:
  static Value next(Interp&, const Value& self, CallArgs&) {
    auto* c = static_cast<Cycler*>(self.obj().get());
    if (c->items_.empty()) fail(ErrorKind::TypeError, "cycler has no items");
    Value v = c->items_[c->pos_];
    c->pos_ = (c->pos_ + 1) % c->items_.size();
    return v;
  }
  static Value reset(Interp&, const Value& self, CallArgs&) {
    static_cast<Cycler*>(self.obj().get())->pos_ = 0;
    return Value::none();
  }
  std::vector<Value> items_;
  std::size_t pos_ = 0;
  int depth_ = 1;
};

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interp&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::str("");
    }
    return Value::str(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

Value g_cycler(Interp&, const Value&, CallArgs& args) {
  return Value::object(std::make_shared<Cycler>(args.positional));
}
Value g_joiner(Interp&, const Value&, CallArgs& args) {
  Args a(args, "joiner");
  const Value sep = a.get(0, "sep", Value::str(", "));
  a.done(1);
  return Value::object(std::make_shared<Joiner>(to_str(sep)));
}

}  // namespace

void install_globals(Scope& globals) {
  auto add = [&](const char* name, Function::Impl impl) {
    globals.set(name, Value::object(std::make_shared<Function>(name, impl)));
  };
  add("range", g_range);
  add("dict", g_dict);
  add("namespace", g_namespace);
  add("cycler", g_cycler);
  add("joiner", g_joiner);
  add("raise_exception", g_raise_exception);
  add("strftime_now", g_strftime_now);
}

Value apply_filter(Interp& interp, const std::string& name, const Value& value, CallArgs& args) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end())
    fail(ErrorKind::TemplateRuntimeError, "No filter named '" + name + "' found.");
  Args a(args, name);
  return it->second(interp, value, a);
}

bool has_test(const std::string& name) {
  return tests().count(name) > 0;
}

bool apply_test(Interp& interp, const std::string& name, const Value& value, CallArgs& args) {
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end())
    fail(ErrorKind::TemplateRuntimeError, "No test named '" + name + "' found.");
  Args a(args, name);
  return it->second(interp, value, a);
}

}  // namespace rkv::jinja
