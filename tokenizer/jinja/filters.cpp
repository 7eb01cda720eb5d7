// Jinja2 3.1's builtin filters (jinja2/filters.py) with transformers' tojson override; the
// sequence filters (map, select, sort, unique, ...) live in seq_filters.cpp. Results that Jinja
// returns as generators are single-pass iterators here too: no len(), always truthy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "tokenizer/jinja/filter_fns.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

// soft_str(v): strings keep their provenance, anything else prints as data.
Result<Value> soft_str(Interp& in, const Value& v, Pos pos) { return in.to_str_value(v, pos); }

Result<Value> iterator_of(Interp& in, std::vector<Value> items, Pos pos) {
  return in.make_list(std::move(items), ListKind::kIterator, pos);
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

Result<int64_t> int_arg(const Value* v, int64_t dflt, std::string_view what, Pos pos) {
  if (v == nullptr) return dflt;
  if (!v->is_integral()) return rt_error(pos, "{} must be an integer, not {}", what, type_name(*v));
  return v->as_int();
}

namespace {

using FilterFn = Result<Value> (*)(Interp&, const Value&, const CallArgs&, Pos);

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

Result<Value> escape_filter(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool force) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, force ? "forceescape" : "escape", pos));
  if (!force && v.is_str() && v.as_str().markup) return v;  // already escaped
  PG_ASSIGN_OR_RETURN(Value s, soft_str(in, v, pos));
  StrBuilder b;
  escape_into(b, s.as_str());
  return in.make_str(b, pos, true);
}
Result<Value> f_escape(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return escape_filter(in, v, a, p, false);
}
Result<Value> f_forceescape(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return escape_filter(in, v, a, p, true);
}

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

}  // namespace

Result<Value> f_length(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "length", pos));
  switch (v.kind()) {
    case Kind::kUndefined: return Value::integer(0);
    case Kind::kStr:
      if (v.as_str().ascii) return Value::integer(static_cast<int64_t>(v.sv().size()));
      PG_TRY(in.charge_bytes(v.sv().size()));  // counting code points reads the whole string
      return Value::integer(static_cast<int64_t>(py::cp_count(v.sv())));
    case Kind::kList:
      if (!v.as_list().has_len()) return rt_error(pos, "object of type 'generator' has no len()");
      return Value::integer(static_cast<int64_t>(v.as_list().items.size()));
    case Kind::kDict: return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
    case Kind::kLoop: return Value::integer(static_cast<int64_t>(v.as_loop().items->size()));
    default: return rt_error(pos, "object of type '{}' has no len()", type_name(v));
  }
}

namespace {

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
    o.item_sep.assign(1, ',');  // json.dumps: "," once an indent is set
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
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

int find_filter(std::string_view name) {
  for (size_t i = 0; i < std::size(kFilters); ++i)
    if (kFilters[i].name == name) return static_cast<int>(i);
  return -1;
}
Result<Value> Interp::apply_filter(int fn, const Value& input, const CallArgs& args, Pos pos) {
  PG_TRY(step());
  if (fn < 0) return internal_error("template error at {}:{}: unknown filter", pos.line, pos.col);
  return kFilters[static_cast<size_t>(fn)].fn(*this, input, args, pos);
}
}  // namespace pg::jinja
