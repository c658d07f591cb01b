// Python's str, list, tuple and dict methods as the immutable sandbox lets templates call them
// (jinja2/sandbox.py: list.append/extend/insert/remove/sort/reverse and dict.update/pop/setdefault/
// clear/popitem are refused with SecurityError; Jinja2 3.1.2 still allows list.pop and clear).
#include <algorithm>
#include <map>

#include "jinja/interp.h"
#include "jinja/unicode.h"

namespace rkv::jinja {

namespace {

using Method = Value (*)(Interp&, const Value&, CallArgs&);

std::string arg_str(const Value& v, const char* method) {
  if (!v.is_str())
    fail(ErrorKind::TypeError,
         std::string(method) + "() argument must be str, not " + v.type_name());
  return v.as_str();
}

std::int64_t cp_index(const std::string& s, std::size_t byte) {
  return static_cast<std::int64_t>(unicode::length(std::string_view(s).substr(0, byte)));
}

// ---- str ---------------------------------------------------------------------------------------

Value s_upper(Interp&, const Value& self, CallArgs&) {
  return Value::str(unicode::upper(self.as_str()));
}
Value s_lower(Interp&, const Value& self, CallArgs&) {
  return Value::str(unicode::lower(self.as_str()));
}

Value strip_impl(const Value& self, CallArgs& args, bool left, bool right, const char* name) {
  Args a(args, name);
  const Value chars = a.get(0, "chars", Value::none());
  a.done(1);
  if (chars.is_none())
    return Value::str(std::string(unicode::strip(self.as_str(), nullptr, left, right)));
  const std::string c = arg_str(chars, name);
  return Value::str(std::string(unicode::strip(self.as_str(), &c, left, right)));
}
Value s_strip(Interp&, const Value& self, CallArgs& args) {
  return strip_impl(self, args, true, true, "strip");
}
Value s_lstrip(Interp&, const Value& self, CallArgs& args) {
  return strip_impl(self, args, true, false, "lstrip");
}
Value s_rstrip(Interp&, const Value& self, CallArgs& args) {
  return strip_impl(self, args, false, true, "rstrip");
}

std::vector<std::string> split_whitespace(const std::string& s, std::int64_t maxsplit,
                                          bool from_right) {
  // Python: runs of whitespace separate; leading/trailing whitespace is dropped, except that
  // after maxsplit splits the rest (with its trailing/leading whitespace stripped on one side)
  // stays.
  std::vector<std::pair<std::size_t, std::size_t>> words;  // byte ranges
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (unicode::is_space(cp)) {
      pos += len;
      continue;
    }
    std::size_t end = pos;
    while (end < s.size()) {
      std::size_t l = 1;
      if (unicode::is_space(unicode::decode(s, end, l))) break;
      end += l;
    }
    words.emplace_back(pos, end);
    pos = end;
  }
  std::vector<std::string> out;
  if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) + 1 >= words.size()) {
    for (const auto& [b, e] : words) out.push_back(s.substr(b, e - b));
    return out;
  }
  const auto m = static_cast<std::size_t>(maxsplit);
  if (!from_right) {
    for (std::size_t i = 0; i < m; ++i)
      out.push_back(s.substr(words[i].first, words[i].second - words[i].first));
    std::string rest = s.substr(words[m].first);
    // The remainder keeps its inner and trailing whitespace (Python strips only the leading).
    out.push_back(rest);
  } else {
    const std::size_t first_kept = words.size() - m;
    const std::size_t rest_end = words[first_kept - 1].second;
    out.push_back(s.substr(0, rest_end));
    for (std::size_t i = first_kept; i < words.size(); ++i)
      out.push_back(s.substr(words[i].first, words[i].second - words[i].first));
  }
  return out;
}

Value split_impl(Interp& interp, const Value& self, CallArgs& args, bool from_right) {
  Args a(args, from_right ? "rsplit" : "split");
  const Value sep = a.get(0, "sep", Value::none());
  const Value maxsplit_v = a.get(1, "maxsplit", Value::integer(-1));
  a.done(2);
  if (!maxsplit_v.is_integral()) fail(ErrorKind::TypeError, "maxsplit must be an integer");
  const std::int64_t maxsplit = maxsplit_v.as_int();
  const std::string& s = self.as_str();
  interp.charge(s.size() / 8 + 1);
  std::vector<std::string> parts;
  if (sep.is_none()) {
    parts = split_whitespace(s, maxsplit, from_right);
  } else {
    const std::string d = arg_str(sep, "split");
    if (d.empty()) fail(ErrorKind::ValueError, "empty separator");
    if (!from_right) {
      std::size_t start = 0;
      std::int64_t n = 0;
      for (;;) {
        const std::size_t at =
            (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, start);
        if (at == std::string::npos) {
          parts.push_back(s.substr(start));
          break;
        }
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
        ++n;
      }
    } else {
      std::size_t end = s.size();
      std::int64_t n = 0;
      for (;;) {
        std::size_t at = std::string::npos;
        if ((maxsplit < 0 || n < maxsplit) && end >= d.size()) at = s.rfind(d, end - d.size());
        if (at == std::string::npos) {
          parts.push_back(s.substr(0, end));
          break;
        }
        parts.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
        ++n;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(Value::str(std::move(p)));
  return Value::list(std::move(out));
}
Value s_split(Interp& interp, const Value& self, CallArgs& args) {
  return split_impl(interp, self, args, false);
}
Value s_rsplit(Interp& interp, const Value& self, CallArgs& args) {
  return split_impl(interp, self, args, true);
}

Value s_splitlines(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "splitlines");
  const bool keepends = truthy(a.get(0, "keepends", Value::boolean(false)));
  a.done(1);
  const std::string& s = self.as_str();
  std::vector<Value> out;
  std::size_t pos = 0, start = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (unicode::is_line_break(cp)) {
      std::size_t end = pos + len;
      if (cp == '\r' && end < s.size() && s[end] == '\n') ++end;
      out.push_back(Value::str(s.substr(start, (keepends ? end : pos) - start)));
      pos = end;
      start = end;
    } else {
      pos += len;
    }
  }
  if (start < s.size()) out.push_back(Value::str(s.substr(start)));
  return Value::list(std::move(out));
}

Value affix_impl(const Value& self, CallArgs& args, bool starts) {
  Args a(args, starts ? "startswith" : "endswith");
  const Value affix = a.get(0, starts ? "prefix" : "suffix");
  const Value start_v = a.get(1, "start", Value::none());
  const Value end_v = a.get(2, "end", Value::none());
  a.done(3);
  std::string s = self.as_str();
  if (!start_v.is_none() || !end_v.is_none()) {
    Value sliced = slice_value(nullptr, self, start_v, end_v, Value::none());
    s = sliced.as_str();
  }
  auto test = [&](const Value& x) {
    if (!x.is_str())
      fail(ErrorKind::TypeError, std::string(starts ? "startswith" : "endswith") +
                                     " first arg must be str or a tuple of str, not " +
                                     x.type_name());
    const std::string& t = x.as_str();
    if (t.size() > s.size()) return false;
    return starts ? s.compare(0, t.size(), t) == 0
                  : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& x : affix.items())
      if (test(x)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(test(affix));
}
Value s_startswith(Interp&, const Value& self, CallArgs& args) {
  return affix_impl(self, args, true);
}
Value s_endswith(Interp&, const Value& self, CallArgs& args) {
  return affix_impl(self, args, false);
}

Value s_replace(Interp& interp, const Value& self, CallArgs& args) {
  Args a(args, "replace");
  const std::string old_s = arg_str(a.get(0, "old"), "replace");
  const std::string new_s = arg_str(a.get(1, "new"), "replace");
  const Value count_v = a.get(2, "count", Value::integer(-1));
  a.done(3);
  if (!count_v.is_integral()) fail(ErrorKind::TypeError, "replace() count must be an integer");
  std::int64_t count = count_v.as_int();
  const std::string& s = self.as_str();
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    const std::vector<std::size_t> off = unicode::offsets(s);
    interp.check_size(s.size() + new_s.size() * off.size());
    for (std::size_t i = 0; i + 1 < off.size(); ++i) {
      if (count != 0) {
        out += new_s;
        --count;
      }
      out.append(s, off[i], off[i + 1] - off[i]);
    }
    if (count != 0) out += new_s;
    interp.charge(out.size() / 16);
    return Value::str(out);
  }
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = count == 0 ? std::string::npos : s.find(old_s, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += new_s;
    interp.check_size(out.size());
    start = at + old_s.size();
    --count;
  }
  out.append(s, start, std::string::npos);
  interp.check_size(out.size());
  interp.charge(out.size() / 16);
  return Value::str(out);
}

Value find_impl(const Value& self, CallArgs& args, bool reverse, bool raise, const char* name) {
  Args a(args, name);
  const std::string sub = arg_str(a.get(0, "sub"), name);
  const Value start_v = a.get(1, "start", Value::none());
  const Value end_v = a.get(2, "end", Value::none());
  a.done(3);
  const std::string& s = self.as_str();
  const std::vector<std::size_t> off = unicode::offsets(s);
  const auto n = static_cast<std::int64_t>(off.size() - 1);
  auto clamp = [&](const Value& v, std::int64_t def) {
    if (v.is_none()) return def;
    std::int64_t i = v.as_int();
    if (i < 0) i += n;
    return std::clamp<std::int64_t>(i, 0, n);
  };
  const std::int64_t start = clamp(start_v, 0), end = clamp(end_v, n);
  std::size_t at = std::string::npos;
  if (start <= end) {
    const std::size_t b = off[static_cast<std::size_t>(start)],
                      e = off[static_cast<std::size_t>(end)];
    const std::string_view window = std::string_view(s).substr(b, e - b);
    const std::size_t r = reverse ? window.rfind(sub) : window.find(sub);
    if (r != std::string_view::npos) at = b + r;
  }
  if (at == std::string::npos) {
    if (raise) fail(ErrorKind::ValueError, "substring not found");
    return Value::integer(-1);
  }
  return Value::integer(cp_index(s, at));
}
Value s_find(Interp&, const Value& self, CallArgs& args) {
  return find_impl(self, args, false, false, "find");
}
Value s_rfind(Interp&, const Value& self, CallArgs& args) {
  return find_impl(self, args, true, false, "rfind");
}
Value s_index(Interp&, const Value& self, CallArgs& args) {
  return find_impl(self, args, false, true, "index");
}
Value s_rindex(Interp&, const Value& self, CallArgs& args) {
  return find_impl(self, args, true, true, "rindex");
}

Value s_count(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "count");
  const std::string sub = arg_str(a.get(0, "sub"), "count");
  a.done(1);
  const std::string& s = self.as_str();
  if (sub.empty()) return Value::integer(static_cast<std::int64_t>(unicode::length(s)) + 1);
  std::int64_t n = 0;
  for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
    ++n;
  return Value::integer(n);
}

Value s_join(Interp& interp, const Value& self, CallArgs& args) {
  Args a(args, "join");
  const Value iterable = a.get(0, "iterable");
  a.done(1);
  std::string out;
  std::size_t i = 0;
  for (const Value& item : interp.iterate(iterable)) {
    if (!item.is_str())
      fail(ErrorKind::TypeError, "sequence item " + std::to_string(i) +
                                     ": expected str instance, " + item.type_name() + " found");
    if (i > 0) out += self.as_str();
    out += item.as_str();
    interp.check_size(out.size());
    ++i;
  }
  interp.charge(out.size() / 16);
  return Value::str(out);
}

Value s_format(Interp& interp, const Value& self, CallArgs& args) {
  return Value::str(str_format(interp, self.as_str(), args));
}

Value s_title(Interp&, const Value& self, CallArgs& args) {
  Args(args, "title").done(0);
  const std::string& s = self.as_str();
  std::string out;
  bool prev_cased = false;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    unicode::append(out, prev_cased ? unicode::to_lower(cp) : unicode::to_title(cp));
    prev_cased = unicode::is_cased(cp);
    pos += len;
  }
  return Value::str(out);
}

Value s_capitalize(Interp&, const Value& self, CallArgs& args) {
  Args(args, "capitalize").done(0);
  const std::string& s = self.as_str();
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

Value s_swapcase(Interp&, const Value& self, CallArgs& args) {
  Args(args, "swapcase").done(0);
  const std::string& s = self.as_str();
  std::string out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    unicode::append(out, unicode::is_upper(cp)   ? unicode::to_lower(cp)
                         : unicode::is_lower(cp) ? unicode::to_upper(cp)
                                                 : cp);
    pos += len;
  }
  return Value::str(out);
}

template <bool (*Pred)(char32_t)>
Value s_is(Interp&, const Value& self, CallArgs& args) {
  Args(args, "is").done(0);
  const std::string& s = self.as_str();
  if (s.empty()) return Value::boolean(false);
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    if (!Pred(unicode::decode(s, pos, len))) return Value::boolean(false);
    pos += len;
  }
  return Value::boolean(true);
}
bool is_alnum(char32_t c) {
  return unicode::is_alpha(c) || unicode::is_numeric(c);
}

Value case_test(const Value& self, bool want_upper) {
  const std::string& s = self.as_str();
  bool cased = false;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (want_upper ? unicode::is_lower(cp) : unicode::is_upper(cp)) return Value::boolean(false);
    if (want_upper ? unicode::is_upper(cp) : unicode::is_lower(cp)) cased = true;
    pos += len;
  }
  return Value::boolean(cased);
}
Value s_islower(Interp&, const Value& self, CallArgs&) {
  return case_test(self, false);
}
Value s_isupper(Interp&, const Value& self, CallArgs&) {
  return case_test(self, true);
}

Value pad_impl(Interp& interp, const Value& self, CallArgs& args, int where, const char* name) {
  Args a(args, name);
  const Value width_v = a.get(0, "width");
  const Value fill_v = a.get(1, "fillchar", Value::str(" "));
  a.done(2);
  if (!width_v.is_integral()) fail(ErrorKind::TypeError, "width must be an integer");
  const std::string fill = arg_str(fill_v, name);
  if (unicode::length(fill) != 1)
    fail(ErrorKind::TypeError, "The fill character must be exactly one character long");
  const std::string& s = self.as_str();
  const auto len = static_cast<std::int64_t>(unicode::length(s));
  const std::int64_t width = width_v.as_int();
  if (width <= len) return self;
  interp.check_size(static_cast<std::size_t>(width) * fill.size());
  const std::int64_t marg = width - len;
  std::int64_t left = where < 0 ? 0 : where > 0 ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < marg - left; ++i) out += fill;
  return Value::str(out);
}
Value s_center(Interp& i, const Value& self, CallArgs& args) {
  return pad_impl(i, self, args, 0, "center");
}
Value s_ljust(Interp& i, const Value& self, CallArgs& args) {
  return pad_impl(i, self, args, -1, "ljust");
}
Value s_rjust(Interp& i, const Value& self, CallArgs& args) {
  return pad_impl(i, self, args, 1, "rjust");
}

Value s_zfill(Interp& interp, const Value& self, CallArgs& args) {
  Args a(args, "zfill");
  const Value width_v = a.get(0, "width");
  a.done(1);
  if (!width_v.is_integral()) fail(ErrorKind::TypeError, "width must be an integer");
  const std::string& s = self.as_str();
  const auto len = static_cast<std::int64_t>(unicode::length(s));
  if (width_v.as_int() <= len) return self;
  interp.check_size(static_cast<std::size_t>(width_v.as_int()));
  const auto pad = static_cast<std::size_t>(width_v.as_int() - len);
  if (!s.empty() && (s[0] == '+' || s[0] == '-'))
    return Value::str(s.substr(0, 1) + std::string(pad, '0') + s.substr(1));
  return Value::str(std::string(pad, '0') + s);
}

Value partition_impl(const Value& self, CallArgs& args, bool reverse) {
  Args a(args, reverse ? "rpartition" : "partition");
  const std::string sep = arg_str(a.get(0, "sep"), "partition");
  a.done(1);
  if (sep.empty()) fail(ErrorKind::ValueError, "empty separator");
  const std::string& s = self.as_str();
  const std::size_t at = reverse ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos) {
    if (reverse) return Value::tuple({Value::str(""), Value::str(""), self});
    return Value::tuple({self, Value::str(""), Value::str("")});
  }
  return Value::tuple(
      {Value::str(s.substr(0, at)), Value::str(sep), Value::str(s.substr(at + sep.size()))});
}
Value s_partition(Interp&, const Value& self, CallArgs& args) {
  return partition_impl(self, args, false);
}
Value s_rpartition(Interp&, const Value& self, CallArgs& args) {
  return partition_impl(self, args, true);
}

Value s_removeprefix(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "removeprefix");
  const std::string p = arg_str(a.get(0, "prefix"), "removeprefix");
  a.done(1);
  const std::string& s = self.as_str();
  if (s.compare(0, p.size(), p) == 0 && s.size() >= p.size()) return Value::str(s.substr(p.size()));
  return self;
}
Value s_removesuffix(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "removesuffix");
  const std::string p = arg_str(a.get(0, "suffix"), "removesuffix");
  a.done(1);
  const std::string& s = self.as_str();
  if (!p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return Value::str(s.substr(0, s.size() - p.size()));
  return self;
}

// ---- list, tuple -------------------------------------------------------------------------------

Value l_index(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "index");
  const Value x = a.get(0, "value");
  a.done(1);
  const auto& items = self.items();
  for (std::size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], x)) return Value::integer(static_cast<std::int64_t>(i));
  fail(ErrorKind::ValueError, repr(x) + " is not in list");
}
Value l_count(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "count");
  const Value x = a.get(0, "value");
  a.done(1);
  std::int64_t n = 0;
  for (const Value& v : self.items())
    if (equals(v, x)) ++n;
  return Value::integer(n);
}
Value l_copy(Interp&, const Value& self, CallArgs& args) {
  Args(args, "copy").done(0);
  return Value::list(self.items());
}
Value l_pop(Interp&, const Value& self, CallArgs& args) {
  Args a(args, "pop");
  const Value index_v = a.get(0, "index", Value::integer(-1));
  a.done(1);
  auto& items = self.list_data()->items;
  if (items.empty()) fail(ErrorKind::ValueError, "pop from empty list");
  if (!index_v.is_integral()) fail(ErrorKind::TypeError, "list indices must be integers");
  std::int64_t i = index_v.as_int();
  const auto n = static_cast<std::int64_t>(items.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) fail(ErrorKind::ValueError, "pop index out of range");
  Value v = items[static_cast<std::size_t>(i)];
  items.erase(items.begin() + i);
  return v;
}
Value l_clear(Interp&, const Value& self, CallArgs& args) {
  Args(args, "clear").done(0);
  self.list_data()->items.clear();
  return Value::none();
}

// ---- dict --------------------------------------------------------------------------------------

Value d_get(Interp&, const Value& self, CallArgs& args) {
  if (args.positional.empty() || args.positional.size() > 2 || !args.keyword.empty())
    fail(ErrorKind::TypeError, "get expected 1 or 2 arguments");
  const Value& key = args.positional[0];
  if (key.is_list() || key.is_dict())
    fail(ErrorKind::TypeError, "unhashable type: '" + key.type_name() + "'");
  if (const Value* v = self.dict().find(key)) return *v;
  return args.positional.size() > 1 ? args.positional[1] : Value::none();
}
Value d_items(Interp&, const Value& self, CallArgs& args) {
  Args(args, "items").done(0);
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().items) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}
Value d_keys(Interp&, const Value& self, CallArgs& args) {
  Args(args, "keys").done(0);
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().items) out.push_back(k);
  return Value::list(std::move(out));
}
Value d_values(Interp&, const Value& self, CallArgs& args) {
  Args(args, "values").done(0);
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().items) out.push_back(v);
  return Value::list(std::move(out));
}
Value d_copy(Interp&, const Value& self, CallArgs& args) {
  Args(args, "copy").done(0);
  return Value::dict(self.dict());
}

Value bind(const char* name, Method m, const Value& self) {
  return Value::object(std::make_shared<Function>(name, m, self));
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.",
      ErrorKind::SecurityError);
}

}  // namespace

Value method_of(const Value& self, const std::string& name) {
  if (self.is_str()) {
    static const std::map<std::string, Method> table = {
        {"capitalize", s_capitalize},
        {"center", s_center},
        {"count", s_count},
        {"endswith", s_endswith},
        {"find", s_find},
        {"format", s_format},
        {"index", s_index},
        {"isalnum", s_is<is_alnum>},
        {"isalpha", s_is<unicode::is_alpha>},
        {"isdecimal", s_is<unicode::is_decimal>},
        {"isdigit", s_is<unicode::is_digit>},
        {"islower", s_islower},
        {"isnumeric", s_is<unicode::is_numeric>},
        {"isspace", s_is<unicode::is_space>},
        {"isupper", s_isupper},
        {"join", s_join},
        {"ljust", s_ljust},
        {"lower", s_lower},
        {"casefold", s_lower},
        {"lstrip", s_lstrip},
        {"partition", s_partition},
        {"removeprefix", s_removeprefix},
        {"removesuffix", s_removesuffix},
        {"replace", s_replace},
        {"rfind", s_rfind},
        {"rindex", s_rindex},
        {"rjust", s_rjust},
        {"rpartition", s_rpartition},
        {"rsplit", s_rsplit},
        {"rstrip", s_rstrip},
        {"split", s_split},
        {"splitlines", s_splitlines},
        {"startswith", s_startswith},
        {"strip", s_strip},
        {"swapcase", s_swapcase},
        {"title", s_title},
        {"upper", s_upper},
        {"zfill", s_zfill},
    };
    if (const auto it = table.find(name); it != table.end())
      return bind(it->first.c_str(), it->second, self);
  } else if (self.is_list() || self.is_tuple()) {
    if (name == "index") return bind("index", l_index, self);
    if (name == "count") return bind("count", l_count, self);
    if (self.is_list()) {
      if (name == "copy") return bind("copy", l_copy, self);
      if (name == "pop") return bind("pop", l_pop, self);
      if (name == "clear") return bind("clear", l_clear, self);
      if (name == "append" || name == "extend" || name == "insert" || name == "remove" ||
          name == "sort" || name == "reverse")
        return unsafe(self, name);
    }
  } else if (self.is_dict()) {
    if (name == "get") return bind("get", d_get, self);
    if (name == "items") return bind("items", d_items, self);
    if (name == "keys") return bind("keys", d_keys, self);
    if (name == "values") return bind("values", d_values, self);
    if (name == "copy") return bind("copy", d_copy, self);
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" ||
        name == "popitem")
      return unsafe(self, name);
  }
  return Value::undefined("'" + self.object_type_repr() + "' has no attribute '" + name + "'");
}

}  // namespace rkv::jinja
