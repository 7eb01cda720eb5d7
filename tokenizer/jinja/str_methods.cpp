// Python str methods as templates call them (strip/split/replace/startswith/find/format...), with
// str.format's mini-language run through jinja2's SandboxedFormatter rules. Results keep the
// provenance of the bytes they copy.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

// Python's optional start/end arguments of find/count/startswith, clamped like slice indices.
Status start_end(const Value* start, const Value* end, int64_t n, int64_t& b, int64_t& e, Pos pos) {
  auto conv = [&](const Value* v, int64_t dflt, int64_t& out) -> Status {
    if (v == nullptr || v->is_none()) {
      out = dflt;
      return ok_status();
    }
    if (!v->is_integral()) return rt_error(pos, "slice indices must be integers or None");
    out = v->as_int();
    if (out < 0) out = std::max<int64_t>(0, out + n);
    out = std::min(out, n);
    return ok_status();
  };
  PG_TRY(conv(start, 0, b));
  return conv(end, n, e);
}

namespace {

// Code point index <-> byte offset helpers for a Str.
struct CpView {
  const Str& s;
  std::vector<size_t> offs;  // empty when ascii
  explicit CpView(const Str& str) : s(str) {
    if (!s.ascii) offs = py::cp_offsets(s.s);
  }
  int64_t len() const { return s.ascii ? static_cast<int64_t>(s.s.size()) : static_cast<int64_t>(offs.size() - 1); }
  size_t byte(int64_t cp) const { return s.ascii ? static_cast<size_t>(cp) : offs[static_cast<size_t>(cp)]; }
  int64_t cp_of(size_t byte_off) const {
    if (s.ascii) return static_cast<int64_t>(byte_off);
    return static_cast<int64_t>(std::lower_bound(offs.begin(), offs.end(), byte_off) - offs.begin());
  }
};

Result<std::string> str_arg(const Value* v, std::string_view method, Pos pos) {
  if (v == nullptr || !v->is_str())
    return rt_error(pos, "{}() argument must be str, not {}", method, v ? type_name(*v) : "nothing");
  return v->sv();
}

Result<Value> substr(Interp& in, const Str& s, size_t b, size_t e, Pos pos) {
  StrBuilder sb;
  sb.append(s, b, e);
  return in.make_str(sb, pos);
}

// Case transforms keep provenance only when the whole input shares it.
Result<Value> mapped(Interp& in, const Str& src, std::string out, Pos pos) {
  return in.make_str(std::move(out), !src.s.empty() && src.all_literal(), pos);
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = py::next_cp(s, i);
    if (prev_cased)
      py::append_lower(out, c);
    else
      py::append_title(out, c);
    prev_cased = py::is_cased(c);
  }
  return out;
}

Result<Value> split(Interp& in, const Value& self, const CallArgs& args, Pos pos, bool from_right) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"sep", "maxsplit"}, 0, a, from_right ? "rsplit" : "split", pos));
  const Str& s = self.as_str();
  int64_t maxsplit = -1;
  if (a[1] != nullptr) {
    if (!a[1]->is_integral()) return rt_error(pos, "'{}' object cannot be interpreted as an integer", type_name(*a[1]));
    maxsplit = a[1]->as_int();
  }
  std::vector<std::pair<size_t, size_t>> parts;
  const std::string& t = s.s;
  if (a[0] == nullptr || a[0]->is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace yields no empty parts.
    std::vector<std::pair<size_t, size_t>> words;  // word byte ranges
    for (size_t i = 0; i < t.size();) {
      size_t j = i;
      if (py::is_space(py::next_cp(t, j))) {
        i = j;
        continue;
      }
      const size_t b = i;
      size_t e = j;
      while (e < t.size()) {
        size_t k = e;
        if (py::is_space(py::next_cp(t, k))) break;
        e = k;
      }
      words.emplace_back(b, e);
      i = e;
    }
    // With maxsplit, the remainder keeps its far-side whitespace (CPython split_whitespace).
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      parts = words;
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) parts.push_back(words[static_cast<size_t>(k)]);
      parts.emplace_back(words[static_cast<size_t>(maxsplit)].first, t.size());
    } else {
      const size_t first_kept = words.size() - static_cast<size_t>(maxsplit);
      parts.emplace_back(0, words[first_kept - 1].second);
      for (size_t k = first_kept; k < words.size(); ++k) parts.push_back(words[k]);
    }
  } else {
    PG_ASSIGN_OR_RETURN(std::string sep, str_arg(a[0], "split", pos));
    if (sep.empty()) return rt_error(pos, "empty separator");
    // Forward search is linear; the reverse one may compare every needle byte at every offset.
    PG_TRY(in.charge_bytes(from_right ? t.size() * std::min<size_t>(sep.size(), 64) : t.size()));
    std::vector<size_t> hits;
    if (!from_right) {
      for (size_t p = py::find(t, sep);
           p != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(hits.size()) < maxsplit);
           p = py::find(t, sep, p + sep.size()))
        hits.push_back(p);
    } else {
      size_t end = t.size();
      while (maxsplit < 0 || static_cast<int64_t>(hits.size()) < maxsplit) {
        if (end < sep.size()) break;
        const size_t p = t.rfind(sep, end - sep.size());
        if (p == std::string::npos) break;
        hits.push_back(p);
        end = p;
      }
      std::reverse(hits.begin(), hits.end());
    }
    size_t b = 0;
    for (size_t h : hits) {
      parts.emplace_back(b, h);
      b = h + sep.size();
    }
    parts.emplace_back(b, t.size());
  }
  PG_TRY(in.step(parts.size() + 1));
  std::vector<Value> items;
  for (auto [b, e] : parts) {
    PG_ASSIGN_OR_RETURN(Value v, substr(in, s, b, e, pos));
    items.push_back(std::move(v));
  }
  return in.make_list(std::move(items), ListKind::kList, pos);
}

Result<Value> replace(Interp& in, const Str& s, const std::string& old, const Str& repl, int64_t count, Pos pos) {
  StrBuilder b;
  const std::string& t = s.s;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    int64_t done = 0;
    size_t i = 0;
    while (true) {
      if (count >= 0 && done >= count) break;
      b.append(repl);
      ++done;
      if (i >= t.size()) break;
      const size_t start = i;
      py::next_cp(t, i);
      b.append(s, start, i);
      if (b.size() > in.options().limits.max_output_bytes) return in.make_str(b, pos);
    }
    b.append(s, i, t.size());
    return in.make_str(b, pos);
  }
  size_t from = 0;
  int64_t done = 0;
  PG_TRY(in.charge_bytes(t.size()));
  for (size_t p = py::find(t, old); p != std::string::npos && (count < 0 || done < count); p = py::find(t, old, from)) {
    b.append(s, from, p);
    b.append(repl);
    from = p + old.size();
    ++done;
    if (b.size() > in.options().limits.max_output_bytes) return in.make_str(b, pos);
  }
  b.append(s, from, t.size());
  return in.make_str(b, pos);
}

// Python's format-spec mini-language for str, int and float (the parts templates use).
Result<std::string> format_spec(const Value& v, std::string_view spec, size_t limit, Pos pos) {
  if (spec.empty()) return to_str(v, limit);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  {
    size_t j = 0;
    const char32_t c0 = py::next_cp(spec, j);
    if (j < spec.size() && is_align(spec[j])) {
      fill.clear();
      py::append_utf8(fill, c0);
      align = spec[j];
      i = j + 1;
    } else if (is_align(spec[0])) {
      align = spec[0];
      i = 1;
    }
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') {
    alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  size_t width = 0;
  // Widths and precisions past 99999 only pad or add digits: refuse them instead of building them.
  for (int n = 0; i < spec.size() && spec[i] >= '0' && spec[i] <= '9'; ++n) {
    if (n == 5) return rt_error(pos, "format width too large");
    width = width * 10 + static_cast<size_t>(spec[i++] - '0');
  }
  char grouping = 0;
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    for (int n = 0; i < spec.size() && spec[i] >= '0' && spec[i] <= '9'; ++n) {
      if (n == 5) return rt_error(pos, "format precision too large");
      precision = precision * 10 + (spec[i++] - '0');
    }
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) return rt_error(pos, "invalid format specifier");

  std::string body;
  std::string sign_str;
  if (v.is_str()) {
    if (type != 0 && type != 's') return rt_error(pos, "unknown format code '{}' for object of type 'str'", type);
    body = v.sv();
    if (precision >= 0) {
      auto offs = py::cp_offsets(body);
      if (static_cast<size_t>(precision) + 1 < offs.size()) body.resize(offs[static_cast<size_t>(precision)]);
    }
    if (align == 0) align = '<';
  } else if (v.is_number()) {
    const bool as_int = v.is_integral() && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
                                            type == 'b' || type == 'n' || type == 'c');
    if (v.is_float() && (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c'))
      return rt_error(pos, "unknown format code '{}' for object of type 'float'", type);
    if (as_int) {
      const int64_t x = v.as_int();
      const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
      if (x < 0) sign_str = "-";
      if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
        const int base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
        std::string d;
        uint64_t m = mag;
        do {
          const int r = static_cast<int>(m % static_cast<uint64_t>(base));
          d.push_back(static_cast<char>(r < 10 ? '0' + r : (type == 'X' ? 'A' : 'a') + r - 10));
          m /= static_cast<uint64_t>(base);
        } while (m > 0);
        std::reverse(d.begin(), d.end());
        body = (alt ? std::string("0") + type : std::string()) + d;
      } else if (type == 'c') {
        if (x < 0 || x > 0x10FFFF || (x >= 0xD800 && x <= 0xDFFF))  // no surrogates: output stays UTF-8
          return rt_error(pos, "%c arg not in range(0x110000) or a surrogate");
        py::append_utf8(body, static_cast<char32_t>(x));
      } else {
        body = std::to_string(mag);
      }
    } else {
      if (type != 0 && std::string_view("eEfFgGn%").find(type) == std::string_view::npos)
        return rt_error(pos, "Unknown format code '{}' for object of type '{}'", type, type_name(v));
      const double x = v.as_double();
      if (std::signbit(x) && !std::isnan(x)) sign_str = "-";
      const double m = std::fabs(x);
      char t = type;
      if (t == 0 && precision < 0) {
        body = v.is_float() ? py::float_repr(m) : std::to_string(std::llabs(v.as_int()));
      } else if (t == '%') {
        body = cformat("%.*f%%", precision < 0 ? 6 : precision, m * 100.0);
      } else {
        if (t == 0 || t == 'n') t = 'g';
        body = cformat(std::string("%") + (alt ? "#" : "") + ".*" + t, precision < 0 ? 6 : precision, m);
      }
    }
    if (grouping != 0) {
      size_t digits_end = 0;
      while (digits_end < body.size() && body[digits_end] >= '0' && body[digits_end] <= '9') ++digits_end;
      std::string grouped;
      for (size_t k = 0; k < digits_end; ++k) {
        if (k > 0 && (digits_end - k) % 3 == 0) grouped.push_back(grouping);
        grouped.push_back(body[k]);
      }
      body = grouped + body.substr(digits_end);
    }
    if (sign_str.empty() && (sign == '+' || sign == ' ')) sign_str = std::string(1, sign);
    if (align == 0) align = '>';
  } else {
    return rt_error(pos, "unsupported format string passed to {}.__format__", type_name(v));
  }
  const size_t n = py::cp_count(body) + sign_str.size();
  if (width <= n) return sign_str + body;
  const size_t pad = width - n;
  std::string fills;
  for (size_t k = 0; k < pad; ++k) fills += fill;
  switch (align) {
    case '<': return sign_str + body + fills;
    case '>': return fills + sign_str + body;
    case '=': return sign_str + fills + body;
    default: {
      std::string left, right;
      for (size_t k = 0; k < pad / 2; ++k) left += fill;
      for (size_t k = 0; k < pad - pad / 2; ++k) right += fill;
      return left + sign_str + body + right;
    }
  }
}

// str.format through jinja2's SandboxedFormatter: fields resolve with the sandbox's getattr/getitem.
Result<Value> str_format(Interp& in, const Str& f, const CallArgs& args, Pos pos) {
  const std::string& t = f.s;
  std::string out;
  int auto_idx = 0;
  bool manual = false;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return rt_error(pos, "Single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string::npos) return rt_error(pos, "expected '}}' before end of string");
    const std::string field = t.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) return rt_error(pos, "nested format fields are not supported");
    i = close;
    std::string name = field, conv, spec;
    const size_t colon = name.find(':');
    if (colon != std::string::npos) {
      spec = name.substr(colon + 1);
      name.resize(colon);
    }
    const size_t bang = name.find('!');
    if (bang != std::string::npos) {
      conv = name.substr(bang + 1);
      name.resize(bang);
    }
    size_t k = 0;
    while (k < name.size() && name[k] != '.' && name[k] != '[') ++k;
    const std::string head = name.substr(0, k);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t idx;
      if (head.empty()) {
        if (manual) return rt_error(pos, "cannot switch from manual field specification to automatic field numbering");
        idx = static_cast<size_t>(auto_idx++);
      } else {
        if (auto_idx > 0)
          return rt_error(pos, "cannot switch from automatic field numbering to manual field specification");
        manual = true;
        idx = head.size() > 9 ? SIZE_MAX : std::stoul(head);
      }
      if (idx >= args.pos.size())
        return rt_error(pos, "Replacement index {} out of range for positional args tuple", idx);
      v = args.pos[idx];
    } else {
      const Value* found = nullptr;
      for (const auto& [kn, kv] : args.kw)
        if (kn == head) found = &kv;
      if (found == nullptr) return rt_error(pos, "KeyError: '{}'", head);
      v = *found;
    }
    while (k < name.size()) {
      PG_TRY(in.step());
      if (name[k] == '.') {
        size_t e = k + 1;
        while (e < name.size() && name[e] != '.' && name[e] != '[') ++e;
        PG_ASSIGN_OR_RETURN(v, in.getattr(v, name.substr(k + 1, e - k - 1), pos));
        k = e;
      } else {
        const size_t e = name.find(']', k);
        if (e == std::string::npos) return rt_error(pos, "Missing ']' in format string");
        const std::string key = name.substr(k + 1, e - k - 1);
        int64_t ik;
        Value kv = !key.empty() && parse_py_int(key, 10, ik) && key.find_first_not_of("0123456789") == std::string::npos
                       ? Value::integer(ik)
                       : Value::str(key, false);
        PG_ASSIGN_OR_RETURN(v, in.getitem(v, kv, pos));
        k = e + 1;
      }
    }
    if (v.is_undefined()) v = Value::str("", false);
    if (conv == "r" || conv == "a") {
      v = Value::str(to_repr(v, in.str_limit()), false);
    } else if (conv == "s") {
      v = Value::str(to_str(v, in.str_limit()), false);
    } else if (!conv.empty()) {
      return rt_error(pos, "Unknown conversion specifier {}", conv);
    }
    PG_ASSIGN_OR_RETURN(std::string piece, format_spec(v, spec, in.str_limit(), pos));
    out += piece;
    if (out.size() > in.options().limits.max_output_bytes)
      return resource_exhausted("template error at {}:{}: formatted string exceeds max_output_bytes", pos.line,
                                pos.col);
  }
  return in.make_str(std::move(out), false, pos);
}

}  // namespace

Result<Value> str_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos) {
  const Str& s = self.as_str();
  const std::string& t = s.s;
  // Code point views (CpView), counts and case maps read the whole string.
  if (!s.ascii) PG_TRY(in.charge_bytes(t.size() * 8));
  std::vector<const Value*> a;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    PG_TRY(bind_args(args, {"chars"}, 0, a, name, pos));
    std::string_view chars;
    const std::string_view* cp = nullptr;
    if (a[0] != nullptr && !a[0]->is_none()) {
      PG_ASSIGN_OR_RETURN(std::string c, str_arg(a[0], name, pos));
      (void)c;
      chars = a[0]->sv();
      cp = &chars;
    }
    const auto r = py::strip_range(t, cp, name != "rstrip", name != "lstrip");
    return substr(in, s, r.begin, r.end, pos);
  }
  if (name == "split" || name == "rsplit") return split(in, self, args, pos, name == "rsplit");
  if (name == "splitlines") {
    PG_TRY(bind_args(args, {"keepends"}, 0, a, name, pos));
    const bool keep = a[0] != nullptr && truthy(*a[0]);
    std::vector<Value> items;
    size_t b = 0;
    for (size_t i = 0; i < t.size();) {
      const size_t start = i;
      const char32_t c = py::next_cp(t, i);
      if (!py::is_line_break(c)) continue;
      if (c == '\r' && i < t.size() && t[i] == '\n') ++i;
      PG_ASSIGN_OR_RETURN(Value v, substr(in, s, b, keep ? i : start, pos));
      items.push_back(std::move(v));
      b = i;
    }
    if (b < t.size()) {
      PG_ASSIGN_OR_RETURN(Value v, substr(in, s, b, t.size(), pos));
      items.push_back(std::move(v));
    }
    return in.make_list(std::move(items), ListKind::kList, pos);
  }
  if (name == "startswith" || name == "endswith") {
    PG_TRY(bind_args(args, {"prefix", "start", "end"}, 1, a, name, pos));
    CpView cv(s);
    int64_t b, e;
    PG_TRY(start_end(a[1], a[2], cv.len(), b, e, pos));
    std::vector<std::string> cands;
    if (a[0]->is_str()) {
      cands.push_back(a[0]->sv());
    } else if (a[0]->is_list() && a[0]->as_list().kind == ListKind::kTuple) {
      for (const Value& x : a[0]->as_list().items) {
        if (!x.is_str()) return rt_error(pos, "tuple for {} must only contain str, not {}", name, type_name(x));
        cands.push_back(x.sv());
      }
    } else {
      return rt_error(pos, "{} first arg must be str or a tuple of str, not {}", name, type_name(*a[0]));
    }
    if (b > e) return Value::boolean(false);
    const std::string_view part = std::string_view(t).substr(cv.byte(b), cv.byte(e) - cv.byte(b));
    for (const auto& c : cands) {
      if (c.size() > part.size()) continue;
      if (name == "startswith" ? part.substr(0, c.size()) == c : part.substr(part.size() - c.size()) == c)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    PG_TRY(bind_args(args, {"old", "new", "count"}, 2, a, name, pos));
    PG_ASSIGN_OR_RETURN(std::string old, str_arg(a[0], name, pos));
    if (!a[1]->is_str()) return rt_error(pos, "replace() argument 2 must be str, not {}", type_name(*a[1]));
    int64_t count = -1;
    if (a[2] != nullptr) {
      if (!a[2]->is_integral())
        return rt_error(pos, "'{}' object cannot be interpreted as an integer", type_name(*a[2]));
      count = a[2]->as_int();
    }
    return replace(in, s, old, a[1]->as_str(), count, pos);
  }
  if (name == "upper" || name == "lower" || name == "casefold") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    return mapped(in, s, name == "upper" ? py::upper(t) : py::lower(t), pos);
  }
  if (name == "title") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    return mapped(in, s, py_title(t), pos);
  }
  if (name == "capitalize" || name == "swapcase") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    std::string out;
    bool first = true;
    for (size_t i = 0; i < t.size();) {
      const char32_t c = py::next_cp(t, i);
      if (name == "capitalize") {
        if (first)
          py::append_title(out, c);
        else
          py::append_lower(out, c);
      } else if (py::is_upper(c)) {
        py::append_lower(out, c);
      } else {
        py::append_upper(out, c);
      }
      first = false;
    }
    return mapped(in, s, std::move(out), pos);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    PG_TRY(bind_args(args, {"sub", "start", "end"}, 1, a, name, pos));
    PG_ASSIGN_OR_RETURN(std::string sub, str_arg(a[0], name, pos));
    CpView cv(s);
    int64_t b, e;
    PG_TRY(start_end(a[1], a[2], cv.len(), b, e, pos));
    PG_TRY(in.charge_bytes(name[0] == 'r' ? t.size() * std::min<size_t>(sub.size(), 64) : t.size()));
    if (name == "count") {
      if (b > e) return Value::integer(0);
      if (sub.empty()) return Value::integer(e - b + 1);
      const std::string_view part = std::string_view(t).substr(cv.byte(b), cv.byte(e) - cv.byte(b));
      int64_t n = 0;
      for (size_t p = py::find(part, sub); p != std::string_view::npos; p = py::find(part, sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    int64_t found = -1;
    if (b <= e) {
      const std::string_view part = std::string_view(t).substr(cv.byte(b), cv.byte(e) - cv.byte(b));
      const size_t p = (name == "find" || name == "index") ? py::find(part, sub) : part.rfind(sub);
      if (p != std::string_view::npos) found = cv.cp_of(cv.byte(b) + p);
    }
    if (found < 0 && (name == "index" || name == "rindex")) return rt_error(pos, "substring not found");
    return Value::integer(found);
  }
  if (name == "join") {
    PG_TRY(bind_args(args, {"iterable"}, 1, a, name, pos));
    PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(*a[0], pos));
    StrBuilder b;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_str())
        return rt_error(pos, "sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      if (i > 0) b.append(s);
      b.append(items[i].as_str());
      if (b.size() > in.options().limits.max_output_bytes) return in.make_str(b, pos);
    }
    return in.make_str(b, pos);
  }
  if (name == "format") return str_format(in, s, args, pos);
  if (name == "center" || name == "ljust" || name == "rjust") {
    PG_TRY(bind_args(args, {"width", "fillchar"}, 1, a, name, pos));
    if (!a[0]->is_integral()) return rt_error(pos, "'{}' object cannot be interpreted as an integer", type_name(*a[0]));
    std::string fill = " ";
    if (a[1] != nullptr) {
      if (!a[1]->is_str() || py::cp_count(a[1]->sv()) != 1)
        return rt_error(pos, "The fill character must be exactly one character long");
      fill = a[1]->sv();
    }
    const int64_t n = static_cast<int64_t>(py::cp_count(t));
    const int64_t width = a[0]->as_int();
    if (width > static_cast<int64_t>(in.options().limits.max_output_bytes))
      return resource_exhausted("template error at {}:{}: padding exceeds max_output_bytes", pos.line, pos.col);
    if (width <= n) return self;
    const int64_t marg = width - n;
    int64_t left = name == "ljust" ? 0 : name == "rjust" ? marg : marg / 2 + (marg & width & 1);
    StrBuilder b;
    for (int64_t k = 0; k < left; ++k) b.append(fill, false);
    b.append(s);
    for (int64_t k = 0; k < marg - left; ++k) b.append(fill, false);
    return in.make_str(b, pos);
  }
  if (name == "zfill") {
    PG_TRY(bind_args(args, {"width"}, 1, a, name, pos));
    if (!a[0]->is_integral()) return rt_error(pos, "'{}' object cannot be interpreted as an integer", type_name(*a[0]));
    const int64_t n = static_cast<int64_t>(py::cp_count(t));
    const int64_t width = a[0]->as_int();
    if (width > static_cast<int64_t>(in.options().limits.max_output_bytes))
      return resource_exhausted("template error at {}:{}: padding exceeds max_output_bytes", pos.line, pos.col);
    if (width <= n) return self;
    StrBuilder b;
    size_t body = 0;
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
      b.append(s, 0, 1);
      body = 1;
    }
    b.append(std::string(static_cast<size_t>(width - n), '0'), false);
    b.append(s, body, t.size());
    return in.make_str(b, pos);
  }
  if (name == "partition" || name == "rpartition") {
    PG_TRY(bind_args(args, {"sep"}, 1, a, name, pos));
    PG_ASSIGN_OR_RETURN(std::string sep, str_arg(a[0], name, pos));
    if (sep.empty()) return rt_error(pos, "empty separator");
    PG_TRY(in.charge_bytes(name == "partition" ? t.size() : t.size() * std::min<size_t>(sep.size(), 64)));
    const size_t p = name == "partition" ? py::find(t, sep) : t.rfind(sep);
    std::vector<Value> parts;
    if (p == std::string::npos) {
      Value empty = Value::str("", false);
      if (name == "partition") {
        parts = {self, empty, empty};
      } else {
        parts = {empty, empty, self};
      }
    } else {
      PG_ASSIGN_OR_RETURN(Value x, substr(in, s, 0, p, pos));
      PG_ASSIGN_OR_RETURN(Value y, substr(in, s, p, p + sep.size(), pos));
      PG_ASSIGN_OR_RETURN(Value z, substr(in, s, p + sep.size(), t.size(), pos));
      parts = {x, y, z};
    }
    return in.make_list(std::move(parts), ListKind::kTuple, pos);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    PG_TRY(bind_args(args, {"affix"}, 1, a, name, pos));
    PG_ASSIGN_OR_RETURN(std::string x, str_arg(a[0], name, pos));
    if (name == "removeprefix" && t.compare(0, x.size(), x) == 0) return substr(in, s, x.size(), t.size(), pos);
    if (name == "removesuffix" && !x.empty() && t.size() >= x.size() &&
        t.compare(t.size() - x.size(), x.size(), x) == 0)
      return substr(in, s, 0, t.size() - x.size(), pos);
    return self;
  }
  if (name.rfind("is", 0) == 0 && name != "isidentifier" && name != "isprintable") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    if (name == "isascii") return Value::boolean(s.ascii);
    if (t.empty()) return Value::boolean(false);
    bool any_cased = false, ok = true, prev_cased = false;
    for (size_t i = 0; i < t.size() && ok;) {
      const char32_t c = py::next_cp(t, i);
      if (name == "isalpha")
        ok = py::is_alpha(c);
      else if (name == "isalnum")
        ok = py::is_alpha(c) || py::is_digit(c);
      else if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
        ok = py::is_digit(c);
      else if (name == "isspace")
        ok = py::is_space(c);
      else if (name == "islower") {
        if (py::is_upper(c)) ok = false;
        any_cased |= py::is_cased(c);
      } else if (name == "isupper") {
        if (py::is_lower(c)) ok = false;
        any_cased |= py::is_cased(c);
      } else if (name == "istitle") {
        if (py::is_upper(c)) {
          ok = !prev_cased;
          any_cased = true;
          prev_cased = true;
        } else if (py::is_lower(c)) {
          ok = prev_cased;
          prev_cased = true;
        } else
          prev_cased = false;
      }
    }
    if (name == "islower" || name == "isupper" || name == "istitle") ok = ok && any_cased;
    return Value::boolean(ok);
  }
  return unsupported("template error at {}:{}: str.{}() is not supported", pos.line, pos.col, name);
}

}  // namespace pg::jinja
