// Jinja2 3.1's builtin filters and tests (jinja2/filters.py, jinja2/tests.py) with transformers'
// tojson override. Results that Jinja returns as generators (map, select, reverse, batch...)
// are single-pass iterators here too: they have no len() and are always truthy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

using FilterFn = Result<Value> (*)(Interp&, const Value&, const CallArgs&, Pos);
using TestFn = Result<bool> (*)(Interp&, const Value&, const CallArgs&, Pos);

// soft_str(v): strings keep their provenance, anything else prints as data.
Result<Value> soft_str(Interp& in, const Value& v, Pos pos) { return in.to_str_value(v, pos); }

Result<Value> iterator_of(Interp& in, std::vector<Value> items, Pos pos) {
  return in.make_list(std::move(items), ListKind::kIterator, pos);
}

// ignore_case(): lower-case strings for case-insensitive sorting/comparison.
Value fold(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_str()) return v;
  return Value::str(py::lower(v.sv()), false);
}

// make_attrgetter: "a.b.0" walks getitem (which falls back to getattr); digits index.
Result<Value> get_attribute(Interp& in, const Value& item, const Value& attribute, const Value* dflt, Pos pos) {
  std::vector<Value> parts;
  if (attribute.is_str()) {
    const std::string& a = attribute.sv();
    size_t b = 0;
    while (true) {
      const size_t e = a.find('.', b);
      const std::string part = a.substr(b, e == std::string::npos ? std::string::npos : e - b);
      int64_t idx;
      if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && parse_py_int(part, 10, idx))
        parts.push_back(Value::integer(idx));
      else
        parts.push_back(Value::str(part, false));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  Value cur = item;
  for (const Value& p : parts) {
    PG_ASSIGN_OR_RETURN(cur, in.getitem(cur, p, pos));
    if (dflt != nullptr && !dflt->is_none() && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

// Python list comparison of sort keys: the first pair that is not == decides with <.
Result<bool> keys_lt(const std::vector<Value>& a, const std::vector<Value>& b, Pos pos) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (py_eq(a[i], b[i])) continue;
    return py_lt(a[i], b[i], pos);
  }
  return a.size() < b.size();
}

// Stable merge sort whose comparison may fail (Python's sorted() raising TypeError). Keys are
// lists (sort's make_multi_attrgetter) when list_keys, else compared directly (dictsort).
Status sort_values(std::vector<std::vector<Value>>& keys, std::vector<size_t>& order, bool reverse, bool list_keys,
                   Pos pos) {
  Status err;
  auto less = [&](size_t x, size_t y) -> bool {
    if (!err.ok()) return false;
    if (reverse) std::swap(x, y);
    auto r = list_keys ? keys_lt(keys[x], keys[y], pos) : py_lt(keys[x][0], keys[y][0], pos);
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  };
  std::vector<size_t> tmp(order.size());
  for (size_t width = 1; width < order.size(); width *= 2) {
    for (size_t lo = 0; lo < order.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, order.size()), hi = std::min(lo + 2 * width, order.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = less(order[j], order[i]) ? order[j++] : order[i++];
      while (i < mid) tmp[k++] = order[i++];
      while (j < hi) tmp[k++] = order[j++];
    }
    order.swap(tmp);
  }
  return err;
}

Result<int64_t> int_arg(const Value* v, int64_t dflt, std::string_view what, Pos pos) {
  if (v == nullptr) return dflt;
  if (!v->is_integral()) return rt_error(pos, "{} must be an integer, not {}", what, type_name(*v));
  return v->as_int();
}

// --- filters ---

Result<Value> f_abs(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "abs", pos));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return rt_error(pos, "integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  return rt_error(pos, "bad operand type for abs(): '{}'", type_name(v));
}

Result<Value> f_attr(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"name"}, 1, a, "attr", pos));
  if (v.is_undefined()) return undefined_error(v, pos);
  const std::string name = to_str(*a[0], in.str_limit());
  if (v.kind() == Kind::kNamespace || v.kind() == Kind::kLoop || find_method(v, name) != MethodLookup::kNone)
    return in.getattr(v, name, pos);
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(v), name));
}

Result<Value> f_batch(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"linecount", "fill_with"}, 1, a, "batch", pos));
  PG_ASSIGN_OR_RETURN(int64_t n, int_arg(a[0], 0, "linecount", pos));
  if (n <= 0) return rt_error(pos, "batch() linecount must be positive (Jinja2 would loop forever)");
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += static_cast<size_t>(n)) {
    std::vector<Value> row(items.begin() + static_cast<std::ptrdiff_t>(i),
                           items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + static_cast<size_t>(n))));
    if (a[1] != nullptr && !a[1]->is_none())
      while (row.size() < static_cast<size_t>(n)) row.push_back(*a[1]);
    PG_ASSIGN_OR_RETURN(Value r, in.make_list(std::move(row), ListKind::kList, pos));
    out.push_back(std::move(r));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_capitalize(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "capitalize", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  return call_method(in, s, "capitalize", {}, pos);
}

Result<Value> f_center(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"width"}, 0, a, "center", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  CallArgs ca;
  ca.pos.push_back(a[0] != nullptr ? *a[0] : Value::integer(80));
  return call_method(in, s, "center", ca, pos);
}

Result<Value> f_default(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"default_value", "boolean"}, 0, a, "default", pos));
  const bool boolean = a[1] != nullptr && truthy(*a[1]);
  if (v.is_undefined() || (boolean && !truthy(v))) return a[0] != nullptr ? *a[0] : Value::str("", true);
  return v;
}

Result<Value> f_dictsort(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "by", "reverse"}, 0, a, "dictsort", pos));
  if (!v.is_dict()) return rt_error(pos, "dictsort: '{}' object has no attribute 'items'", type_name(v));
  const bool cs = a[0] != nullptr && truthy(*a[0]);
  int which = 0;
  if (a[1] != nullptr) {
    const std::string by = to_str(*a[1], in.str_limit());
    if (by == "value")
      which = 1;
    else if (by != "key")
      return rt_error(pos, "You can only sort by either \"key\" or \"value\"");
  }
  const auto& items = v.as_dict().items;
  std::vector<std::vector<Value>> keys;
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    keys.push_back({fold(which == 0 ? items[i].first : items[i].second, cs)});
    order.push_back(i);
  }
  PG_TRY(in.step(items.size() * 4 + 1));
  PG_TRY(sort_values(keys, order, a[2] != nullptr && truthy(*a[2]), false, pos));
  std::vector<Value> out;
  for (size_t i : order) {
    PG_ASSIGN_OR_RETURN(Value pair, in.make_list({items[i].first, items[i].second}, ListKind::kTuple, pos));
    out.push_back(std::move(pair));
  }
  return in.make_list(std::move(out), ListKind::kList, pos);
}

Result<Value> escape_filter(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool force) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, force ? "forceescape" : "escape", pos));
  if (!force && v.is_str() && v.as_str().markup) return v;  // already escaped
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  StrBuilder b;
  escape_into(b, s.as_str());
  return in.make_str(b, pos, true);
}
Result<Value> f_escape(Interp& in, const Value& v, const CallArgs& a, Pos p) { return escape_filter(in, v, a, p, false); }
Result<Value> f_forceescape(Interp& in, const Value& v, const CallArgs& a, Pos p) { return escape_filter(in, v, a, p, true); }

Result<Value> f_first(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "first", pos));
  if (v.is_list() && v.as_list().kind == ListKind::kIterator) {
    const ListObj& l = v.as_list();
    if (l.cursor < l.items.size()) return l.items[l.cursor++];
    return Value::undefined("No first item, sequence was empty.");
  }
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "last", pos));
  if (v.is_list() && v.as_list().kind == ListKind::kIterator)
    return rt_error(pos, "'generator' object is not reversible");
  if (!v.is_undefined() && !v.is_str() && !v.is_list() && !v.is_dict())
    return rt_error(pos, "'{}' object is not reversible", type_name(v));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_float(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"default"}, 0, a, "float", pos));
  const Value dflt = a[0] != nullptr ? *a[0] : Value::floating(0.0);
  if (v.is_undefined()) return undefined_error(v, pos);
  if (v.is_number()) return Value::floating(v.as_double());
  double d;
  if (v.is_str() && parse_py_float(v.sv(), d)) return Value::floating(d);
  return dflt;
}

Result<Value> f_format(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  if (!args.pos.empty() && !args.kw.empty())
    return rt_error(pos, "can't handle positional and keyword arguments at the same time");
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  Value operand;
  if (!args.kw.empty()) {
    std::vector<std::pair<Value, Value>> items;
    for (const auto& [k, x] : args.kw) items.emplace_back(Value::str(k, false), x);
    PG_ASSIGN_OR_RETURN(operand, in.make_dict(std::move(items), pos));
  } else {
    PG_ASSIGN_OR_RETURN(operand, in.make_list(args.pos, ListKind::kTuple, pos));
  }
  return binary_op(in, BinOp::kMod, s, operand, pos);
}

Result<Value> f_indent(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"width", "first", "blank"}, 0, a, "indent", pos));
  std::string ind = "    ";
  if (a[0] != nullptr) {
    if (a[0]->is_str()) {
      ind = a[0]->sv();
    } else if (a[0]->is_integral()) {
      const int64_t w = a[0]->as_int();
      if (w > 4096) return rt_error(pos, "indent width {} is too large", w);
      ind = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
    } else {
      return rt_error(pos, "can't multiply sequence by non-int of type '{}'", type_name(*a[0]));
    }
  }
  const bool first = a[1] != nullptr && truthy(*a[1]);
  const bool blank = a[2] != nullptr && truthy(*a[2]);
  // do_indent appends "\n" to the value itself: only strings survive that.
  if (v.is_undefined()) return undefined_error(v, pos);
  if (!v.is_str()) return rt_error(pos, "indent: unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  const Value& sv = v;
  const Str& s = sv.as_str();
  // Python: (s + "\n").splitlines(), then rejoin with "\n" + indent.
  std::vector<std::pair<size_t, size_t>> lines;
  const std::string& t = s.s;
  size_t b = 0;
  for (size_t i = 0; i < t.size();) {
    const size_t start = i;
    const char32_t c = py::next_cp(t, i);
    if (!py::is_line_break(c)) continue;
    if (c == '\r' && i < t.size() && t[i] == '\n') ++i;
    lines.emplace_back(b, start);
    b = i;
  }
  lines.emplace_back(b, t.size());  // the quirk's "\n" closes the last line
  StrBuilder out;
  if (first) out.append(ind, false);
  for (size_t k = 0; k < lines.size(); ++k) {
    const bool empty = lines[k].first == lines[k].second;
    if (k > 0) {
      out.append("\n", false);
      if (blank || !empty) out.append(ind, false);
    }
    out.append(s, lines[k].first, lines[k].second);
    if (out.size() > in.options().limits.max_output_bytes) return in.make_str(out, pos);
  }
  return in.make_str(out, pos);
}

Result<Value> f_int(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"default", "base"}, 0, a, "int", pos));
  const Value dflt = a[0] != nullptr ? *a[0] : Value::integer(0);
  PG_ASSIGN_OR_RETURN(int64_t base, int_arg(a[1], 10, "base", pos));
  if (v.is_undefined()) return undefined_error(v, pos);
  if (v.is_integral()) return Value::integer(v.as_int());
  double d = 0;
  if (v.is_str()) {
    int64_t i;
    if (base >= 2 && base <= 36 && parse_py_int(v.sv(), static_cast<int>(base), i)) return Value::integer(i);
    if (!parse_py_float(v.sv(), d)) return dflt;  // "42.23"|int gives 42
  } else if (v.is_float()) {
    d = v.as_double();
  } else {
    return dflt;
  }
  if (std::isnan(d)) return rt_error(pos, "cannot convert float NaN to integer");
  if (!(std::fabs(d) < 9.2e18)) return rt_error(pos, "cannot convert float {} to a 64-bit integer", py::float_repr(d));
  return Value::integer(static_cast<int64_t>(d));
}

Result<Value> f_items(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "items", pos));
  if (v.is_undefined()) return iterator_of(in, {}, pos);
  if (!v.is_dict()) return rt_error(pos, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items) {
    PG_ASSIGN_OR_RETURN(Value pair, in.make_list({k, x}, ListKind::kTuple, pos));
    out.push_back(std::move(pair));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_join(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"d", "attribute"}, 0, a, "join", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  StrBuilder b;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && a[0] != nullptr) in.append_str(b, *a[0]);
    if (a[1] != nullptr) {
      PG_ASSIGN_OR_RETURN(Value x, get_attribute(in, items[i], *a[1], nullptr, pos));
      in.append_str(b, x);
    } else {
      in.append_str(b, items[i]);
    }
    if (b.size() > in.options().limits.max_output_bytes) return in.make_str(b, pos);
  }
  return in.make_str(b, pos);
}

Result<Value> f_length(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "length", pos));
  switch (v.kind()) {
    case Kind::kUndefined: return Value::integer(0);
    case Kind::kStr: return Value::integer(static_cast<int64_t>(v.as_str().ascii ? v.sv().size() : py::cp_count(v.sv())));
    case Kind::kList:
      if (!v.as_list().has_len()) return rt_error(pos, "object of type 'generator' has no len()");
      return Value::integer(static_cast<int64_t>(v.as_list().items.size()));
    case Kind::kDict: return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
    case Kind::kLoop: return Value::integer(static_cast<int64_t>(v.as_loop().items->size()));
    default: return rt_error(pos, "object of type '{}' has no len()", type_name(v));
  }
}

Result<Value> f_list(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "list", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  return in.make_list(std::move(items), ListKind::kList, pos);
}

Result<Value> f_lower(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "lower", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  return call_method(in, s, "lower", {}, pos);
}

Result<Value> f_upper(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "upper", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  return call_method(in, s, "upper", {}, pos);
}

Result<Value> f_map(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  if (!truthy(v)) return iterator_of(in, {}, pos);
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, x] : args.kw) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") dflt = &x;
  }
  if (args.pos.empty() && attribute != nullptr) {
    for (const auto& [k, x] : args.kw)
      if (k != "attribute" && k != "default") return rt_error(pos, "Unexpected keyword argument '{}'", k);
    for (const Value& item : items) {
      PG_ASSIGN_OR_RETURN(Value r, get_attribute(in, item, *attribute, dflt, pos));
      out.push_back(std::move(r));
    }
    return iterator_of(in, std::move(out), pos);
  }
  if (args.pos.empty()) return rt_error(pos, "map requires a filter argument");
  const std::string name = to_str(args.pos[0], in.str_limit());
  const int fn = find_filter(name);
  if (fn < 0) return rt_error(pos, "No filter named '{}'.", name);
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& item : items) {
    PG_ASSIGN_OR_RETURN(Value r, in.apply_filter(fn, item, rest, pos));
    out.push_back(std::move(r));
  }
  return iterator_of(in, std::move(out), pos);
}

// select / reject / selectattr / rejectattr (jinja2.filters.select_or_reject).
Result<Value> select_or_reject(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool select, bool attr) {
  if (!truthy(v)) return iterator_of(in, {}, pos);
  size_t off = 0;
  const Value* attribute = nullptr;
  if (attr) {
    if (args.pos.empty()) return rt_error(pos, "Missing parameter for attribute name");
    attribute = &args.pos[0];
    off = 1;
  }
  int fn = -1;
  CallArgs rest;
  if (args.pos.size() > off) {
    const std::string name = to_str(args.pos[off], in.str_limit());
    fn = find_test(name);
    if (fn < 0) return rt_error(pos, "No test named '{}'.", name);
    rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), args.pos.end());
    rest.kw = args.kw;
  }
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  for (Value& item : items) {
    Value subject = item;
    if (attribute != nullptr) {
      PG_ASSIGN_OR_RETURN(subject, get_attribute(in, item, *attribute, nullptr, pos));
    }
    bool keep;
    if (fn >= 0) {
      PG_ASSIGN_OR_RETURN(keep, in.apply_test(fn, subject, rest, pos));
    } else {
      keep = truthy(subject);
    }
    if (keep == select) out.push_back(std::move(item));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_select(Interp& in, const Value& v, const CallArgs& a, Pos p) { return select_or_reject(in, v, a, p, true, false); }
Result<Value> f_reject(Interp& in, const Value& v, const CallArgs& a, Pos p) { return select_or_reject(in, v, a, p, false, false); }
Result<Value> f_selectattr(Interp& in, const Value& v, const CallArgs& a, Pos p) { return select_or_reject(in, v, a, p, true, true); }
Result<Value> f_rejectattr(Interp& in, const Value& v, const CallArgs& a, Pos p) { return select_or_reject(in, v, a, p, false, true); }

// min / max / unique / sort share the key function: attribute lookup, then case folding.
Result<std::vector<Value>> sort_keys(Interp& in, const std::vector<Value>& items, const Value* attribute, bool cs, Pos pos) {
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value k = item;
    if (attribute != nullptr && !attribute->is_none()) {
      PG_ASSIGN_OR_RETURN(k, get_attribute(in, item, *attribute, nullptr, pos));
    }
    keys.push_back(fold(k, cs));
  }
  return keys;
}

Result<Value> min_max(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool is_max) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "attribute"}, 0, a, is_max ? "max" : "min", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  PG_ASSIGN_OR_RETURN(std::vector<Value> keys, sort_keys(in, items, a[1], a[0] != nullptr && truthy(*a[0]), pos));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    PG_ASSIGN_OR_RETURN(bool better, is_max ? py_lt(keys[best], keys[i], pos) : py_lt(keys[i], keys[best], pos));
    if (better) best = i;
  }
  return items[best];
}

Result<Value> f_max(Interp& in, const Value& v, const CallArgs& a, Pos p) { return min_max(in, v, a, p, true); }
Result<Value> f_min(Interp& in, const Value& v, const CallArgs& a, Pos p) { return min_max(in, v, a, p, false); }

Result<Value> f_replace(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"old", "new", "count"}, 2, a, "replace", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  PG_ASSIGN_OR_RETURN(Value old_s, soft_str(in, *a[0], pos));
  PG_ASSIGN_OR_RETURN(Value new_s, soft_str(in, *a[1], pos));
  CallArgs ca;
  ca.pos = {old_s, new_s};
  if (a[2] != nullptr && !a[2]->is_none()) ca.pos.push_back(*a[2]);
  return call_method(in, s, "replace", ca, pos);
}

Result<Value> f_reverse(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "reverse", pos));
  if (v.is_str()) {
    PG_ASSIGN_OR_RETURN(std::vector<Value> chars, in.iterate(v, pos));
    StrBuilder b;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) b.append(it->as_str());
    return in.make_str(b, pos);
  }
  const bool reversible = !v.is_list() || v.as_list().kind != ListKind::kIterator;
  if (!v.is_undefined() && !v.is_list() && !v.is_dict()) return rt_error(pos, "argument must be iterable");
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::reverse(items.begin(), items.end());
  // reversed(seq) is a single-pass iterator; a generator is copied into a list first.
  return in.make_list(std::move(items), reversible ? ListKind::kIterator : ListKind::kList, pos);
}

Result<Value> f_round(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"precision", "method"}, 0, a, "round", pos));
  PG_ASSIGN_OR_RETURN(int64_t precision, int_arg(a[0], 0, "precision", pos));
  const std::string method = a[1] != nullptr ? to_str(*a[1], in.str_limit()) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    return rt_error(pos, "method must be common, ceil or floor");
  if (!v.is_number()) return rt_error(pos, "type {} doesn't define __round__ method", type_name(v));
  if (precision > 300 || precision < -300) return rt_error(pos, "round() precision {} is out of range", precision);
  if (method == "common") {
    if (v.is_integral() && precision >= 0) return Value::integer(v.as_int());
    const double x = v.as_double();
    if (!std::isfinite(x)) return Value::floating(x);
    if (precision >= 0) {
      // CPython rounds through the correctly rounded decimal string (half to even on the exact value).
      const double r = std::strtod(cformat("%.*f", static_cast<int>(precision), x).c_str(), nullptr);
      if (v.is_integral()) return Value::integer(static_cast<int64_t>(r));
      return Value::floating(r);
    }
    const double p = std::pow(10.0, static_cast<double>(-precision));
    const double r = std::nearbyint(x / p) * p;
    if (v.is_integral()) return Value::integer(static_cast<int64_t>(r));
    return Value::floating(r);
  }
  const double p = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * p;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Result<Value> f_safe(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "safe", pos));
  if (v.is_str() && v.as_str().markup) return v;
  StrBuilder b;
  if (v.is_str())
    b.append(v.as_str());
  else
    in.append_str(b, v);
  return in.make_str(b, pos, true);
}

Result<Value> f_slice(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"slices", "fill_with"}, 1, a, "slice", pos));
  PG_ASSIGN_OR_RETURN(int64_t slices, int_arg(a[0], 0, "slices", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> seq, in.iterate(v, pos));
  if (slices == 0) return rt_error(pos, "integer division or modulo by zero");
  if (slices < 0) return iterator_of(in, {}, pos);
  PG_TRY(in.step(static_cast<uint64_t>(slices)));
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, extra = length % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (a[1] != nullptr && !a[1]->is_none() && k >= extra) tmp.push_back(*a[1]);
    PG_ASSIGN_OR_RETURN(Value l, in.make_list(std::move(tmp), ListKind::kList, pos));
    out.push_back(std::move(l));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_sort(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"reverse", "case_sensitive", "attribute"}, 0, a, "sort", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  // make_multi_attrgetter: "a,b.c" sorts by several keys; each item's key is a list.
  std::vector<Value> attrs;
  if (a[2] != nullptr && a[2]->is_str()) {
    const std::string& spec = a[2]->sv();
    for (size_t b = 0;;) {
      const size_t e = spec.find(',', b);
      attrs.push_back(Value::str(spec.substr(b, e == std::string::npos ? std::string::npos : e - b), false));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else if (a[2] != nullptr && !a[2]->is_none()) {
    attrs.push_back(*a[2]);
  }
  const bool cs = a[1] != nullptr && truthy(*a[1]);
  std::vector<std::vector<Value>> keys;
  for (const Value& item : items) {
    std::vector<Value> k;
    if (attrs.empty()) k.push_back(fold(item, cs));
    for (const Value& attr : attrs) {
      PG_ASSIGN_OR_RETURN(Value x, get_attribute(in, item, attr, nullptr, pos));
      k.push_back(fold(x, cs));
    }
    keys.push_back(std::move(k));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  PG_TRY(in.step(items.size() * 4 + 1));
  PG_TRY(sort_values(keys, order, a[0] != nullptr && truthy(*a[0]), true, pos));
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return in.make_list(std::move(out), ListKind::kList, pos);
}

Result<Value> f_string(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "string", pos));
  return soft_str(in, v, pos);
}

Result<Value> f_sum(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"attribute", "start"}, 0, a, "sum", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  Value acc = a[1] != nullptr ? *a[1] : Value::integer(0);
  for (const Value& item : items) {
    Value x = item;
    if (a[0] != nullptr) {
      PG_ASSIGN_OR_RETURN(x, get_attribute(in, item, *a[0], nullptr, pos));
    }
    PG_ASSIGN_OR_RETURN(acc, binary_op(in, BinOp::kAdd, acc, x, pos));
  }
  return acc;
}

Result<Value> f_title(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "title", pos));
  PG_ASSIGN_OR_RETURN(Value sv, soft_str(in, v, pos));
  // "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s({\[<]+)", s) if item)
  const std::string& t = sv.sv();
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < t.size();) {
    const char32_t c = py::next_cp(t, i);
    const bool sep = py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      py::append_utf8(out, c);
      word_start = true;
    } else if (word_start) {
      py::append_upper(out, c);
      word_start = false;
    } else {
      py::append_lower(out, c);
    }
  }
  return in.make_str(std::move(out), !t.empty() && sv.as_str().all_literal(), pos);
}

// transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
Result<Value> f_tojson(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, 0, a, "tojson", pos));
  DumpOptions o;
  o.ensure_ascii = a[0] != nullptr && truthy(*a[0]);
  if (a[1] != nullptr && !a[1]->is_none()) {
    if (a[1]->is_str()) {
      o.indent = a[1]->sv();
    } else if (a[1]->is_integral()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1]->as_int(), 0, 4096)), ' ');
    } else {
      return rt_error(pos, "can't multiply sequence by non-int of type '{}'", type_name(*a[1]));
    }
    o.item_sep = ",";
  }
  if (a[2] != nullptr && !a[2]->is_none()) {
    PG_ASSIGN_OR_RETURN(std::vector<Value> seps, in.iterate(*a[2], pos));
    if (seps.size() != 2 || !seps[0].is_str() || !seps[1].is_str())
      return rt_error(pos, "separators must be a pair of strings");
    o.item_sep = seps[0].sv();
    o.key_sep = seps[1].sv();
  }
  o.sort_keys = a[3] != nullptr && truthy(*a[3]);
  o.max_bytes = in.options().limits.max_output_bytes;
  std::string out;
  PG_TRY(json_dump(v, o, out, pos));
  return in.make_str(std::move(out), false, pos);
}

Result<Value> f_trim(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"chars"}, 0, a, "trim", pos));
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  CallArgs ca;
  if (a[0] != nullptr) ca.pos.push_back(*a[0]);
  return call_method(in, s, "strip", ca, pos);
}

Result<Value> f_truncate(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"length", "killwords", "end", "leeway"}, 0, a, "truncate", pos));
  PG_ASSIGN_OR_RETURN(int64_t length, int_arg(a[0], 255, "length", pos));
  const bool killwords = a[1] != nullptr && truthy(*a[1]);
  const std::string end = a[2] != nullptr ? to_str(*a[2], in.str_limit()) : "...";
  PG_ASSIGN_OR_RETURN(int64_t leeway, int_arg(a[3], 5, "leeway", pos));
  const int64_t end_len = static_cast<int64_t>(py::cp_count(end));
  if (length < end_len) return rt_error(pos, "expected length >= {}, got {}", end_len, length);
  if (leeway < 0) return rt_error(pos, "expected leeway >= 0, got {}", leeway);
  // do_truncate takes len() of the value itself; only a string is cut.
  if (!v.is_str()) {
    PG_ASSIGN_OR_RETURN(Value n, f_length(in, v, {}, pos));
    if (n.as_int() <= length + leeway) return v;
    return rt_error(pos, "truncate: cannot truncate a {}", type_name(v));
  }
  const Value& sv = v;
  const auto offs = py::cp_offsets(sv.sv());
  const int64_t n = static_cast<int64_t>(offs.size()) - 1;
  if (n <= length + leeway) return sv;
  StrBuilder b;
  size_t cut = offs[static_cast<size_t>(length - end_len)];
  if (!killwords) {
    const size_t sp = std::string_view(sv.sv()).substr(0, cut).rfind(' ');
    if (sp != std::string::npos) cut = sp;
  }
  b.append(sv.as_str(), 0, cut);
  b.append(end, false);
  return in.make_str(b, pos);
}

Result<Value> f_unique(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "attribute"}, 0, a, "unique", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> keys, sort_keys(in, items, a[1], a[0] != nullptr && truthy(*a[0]), pos));
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); ++i) {
    auto k = hash_key(keys[i]);
    if (!k) return rt_error(pos, "unhashable type: '{}'", type_name(keys[i]));
    PG_TRY(in.charge_bytes(k->size()));
    if (!seen.insert(std::move(*k)).second) continue;
    out.push_back(items[i]);
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_wordcount(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "wordcount", pos));
  PG_ASSIGN_OR_RETURN(Value sv, soft_str(in, v, pos));
  int64_t n = 0;
  bool in_word = false;
  const std::string& t = sv.sv();
  for (size_t i = 0; i < t.size();) {
    const char32_t c = py::next_cp(t, i);
    const bool w = py::is_alpha(c) || py::is_digit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct FilterDef {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterDef kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},       {"batch", f_batch},         {"capitalize", f_capitalize},
    {"center", f_center},     {"count", f_length},    {"d", f_default},           {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_forceescape}, {"format", f_format},    {"indent", f_indent},
    {"int", f_int},           {"items", f_items},     {"join", f_join},           {"last", f_last},
    {"length", f_length},     {"list", f_list},       {"lower", f_lower},         {"map", f_map},
    {"max", f_max},           {"min", f_min},         {"reject", f_reject},       {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse}, {"round", f_round},         {"safe", f_safe},
    {"select", f_select},     {"selectattr", f_selectattr}, {"slice", f_slice},   {"sort", f_sort},
    {"string", f_string},     {"sum", f_sum},         {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},     {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// --- tests ---

Result<bool> num_mod(Interp& in, const Value& v, const Value& d, Pos pos, int64_t& out_is_zero) {
  PG_ASSIGN_OR_RETURN(Value r, binary_op(in, BinOp::kMod, v, d, pos));
  out_is_zero = py_eq(r, Value::integer(0)) ? 1 : 0;
  return true;
}

Result<bool> t_defined(Interp&, const Value& v, const CallArgs&, Pos) { return !v.is_undefined(); }
Result<bool> t_undefined(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_undefined(); }
Result<bool> t_none(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_none(); }
Result<bool> t_boolean(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool(); }
Result<bool> t_true(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool() && v.as_bool(); }
Result<bool> t_false(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool() && !v.as_bool(); }
Result<bool> t_integer(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_int(); }
Result<bool> t_float(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_float(); }
Result<bool> t_number(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_number(); }
Result<bool> t_string(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str(); }
Result<bool> t_mapping(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_dict(); }
// Undefined defines __call__ (to raise), so callable() says yes.
Result<bool> t_callable(Interp&, const Value& v, const CallArgs&, Pos) { return v.kind() == Kind::kFunc || v.is_undefined(); }
Result<bool> t_escaped(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && v.as_str().markup; }
Result<bool> t_iterable(Interp&, const Value& v, const CallArgs&, Pos) {
  return v.is_undefined() || v.is_str() || v.is_list() || v.is_dict() || v.kind() == Kind::kLoop;
}
Result<bool> t_sequence(Interp&, const Value& v, const CallArgs&, Pos) {
  return v.is_undefined() || v.is_str() || v.is_dict() || (v.is_list() && v.as_list().subscriptable());
}
Result<bool> t_even(Interp& in, const Value& v, const CallArgs&, Pos pos) {
  int64_t zero;
  PG_TRY(num_mod(in, v, Value::integer(2), pos, zero).status());
  return zero == 1;
}
Result<bool> t_odd(Interp& in, const Value& v, const CallArgs&, Pos pos) {
  PG_ASSIGN_OR_RETURN(Value r, binary_op(in, BinOp::kMod, v, Value::integer(2), pos));
  return py_eq(r, Value::integer(1));
}
Result<bool> t_divisibleby(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"num"}, 1, a, "divisibleby", pos));
  int64_t zero;
  PG_TRY(num_mod(in, v, *a[0], pos, zero).status());
  return zero == 1;
}
Result<bool> t_lower(Interp& in, const Value& v, const CallArgs&, Pos) {
  const std::string s = to_str(v, in.str_limit());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = py::next_cp(s, i);
    if (py::is_upper(c)) return false;
    cased |= py::is_cased(c);
  }
  return cased;
}
Result<bool> t_upper(Interp& in, const Value& v, const CallArgs&, Pos) {
  const std::string s = to_str(v, in.str_limit());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = py::next_cp(s, i);
    if (py::is_lower(c)) return false;
    cased |= py::is_cased(c);
  }
  return cased;
}
Result<bool> t_filter(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && find_filter(v.sv()) >= 0; }
Result<bool> t_test(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && find_test(v.sv()) >= 0; }

template <CmpOp kOp>
Result<bool> t_cmp(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"other"}, 1, a, "comparison test", pos));
  return compare(in, kOp, v, *a[0], pos);
}
Result<bool> t_in(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"seq"}, 1, a, "in", pos));
  return contains(in, *a[0], v, pos);
}
Result<bool> t_sameas(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"other"}, 1, a, "sameas", pos));
  const Value& o = *a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kUndefined: return v.is_none() || v.identity() == o.identity();
    case Kind::kBool: return v.as_bool() == o.as_bool();
    case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's small ints
    case Kind::kFloat: return false;
    default: return v.identity() == o.identity();
  }
}

struct TestDef {
  std::string_view name;
  TestFn fn;
  size_t max_args = 0;  // arguments after the tested value
};

constexpr TestDef kTests[] = {
    {"!=", t_cmp<CmpOp::kNe>, 1},     {"<", t_cmp<CmpOp::kLt>, 1},        {"<=", t_cmp<CmpOp::kLe>, 1},
    {"==", t_cmp<CmpOp::kEq>, 1},     {">", t_cmp<CmpOp::kGt>, 1},        {">=", t_cmp<CmpOp::kGe>, 1},
    {"boolean", t_boolean},        {"callable", t_callable},        {"defined", t_defined},
    {"divisibleby", t_divisibleby, 1}, {"eq", t_cmp<CmpOp::kEq>, 1},      {"equalto", t_cmp<CmpOp::kEq>, 1},
    {"escaped", t_escaped},        {"even", t_even},                {"false", t_false},
    {"filter", t_filter},          {"float", t_float},              {"ge", t_cmp<CmpOp::kGe>, 1},
    {"greaterthan", t_cmp<CmpOp::kGt>, 1}, {"gt", t_cmp<CmpOp::kGt>, 1},  {"in", t_in, 1},
    {"integer", t_integer},        {"iterable", t_iterable},        {"le", t_cmp<CmpOp::kLe>, 1},
    {"lessthan", t_cmp<CmpOp::kLt>, 1}, {"lower", t_lower},            {"lt", t_cmp<CmpOp::kLt>, 1},
    {"mapping", t_mapping},        {"ne", t_cmp<CmpOp::kNe>, 1},       {"none", t_none},
    {"number", t_number},          {"odd", t_odd},                  {"sameas", t_sameas, 1},
    {"sequence", t_sequence},      {"string", t_string},            {"test", t_test},
    {"true", t_true},              {"undefined", t_undefined},      {"upper", t_upper},
};

}  // namespace

int find_filter(std::string_view name) {
  for (size_t i = 0; i < std::size(kFilters); ++i)
    if (kFilters[i].name == name) return static_cast<int>(i);
  return -1;
}

int find_test(std::string_view name) {
  for (size_t i = 0; i < std::size(kTests); ++i)
    if (kTests[i].name == name) return static_cast<int>(i);
  return -1;
}

Result<Value> Interp::apply_filter(int fn, const Value& input, const CallArgs& args, Pos pos) {
  PG_TRY(step());
  if (fn < 0) return internal_error("template error at {}:{}: unknown filter", pos.line, pos.col);
  return kFilters[static_cast<size_t>(fn)].fn(*this, input, args, pos);
}

Result<bool> Interp::apply_test(int fn, const Value& input, const CallArgs& args, Pos pos) {
  PG_TRY(step());
  if (fn < 0) return internal_error("template error at {}:{}: unknown test", pos.line, pos.col);
  const TestDef& t = kTests[static_cast<size_t>(fn)];
  if (args.pos.size() + args.kw.size() > t.max_args)
    return rt_error(pos, "test '{}' takes {} argument(s) but {} were given", t.name, t.max_args + 1,
                    args.pos.size() + args.kw.size() + 1);
  return kTests[static_cast<size_t>(fn)].fn(*this, input, args, pos);
}

}  // namespace pg::jinja
