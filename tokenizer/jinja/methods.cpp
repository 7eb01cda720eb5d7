// Method lookup and dispatch for str / list / tuple / dict values as the immutable sandbox allows
// them (mutating list/dict methods are refused; str methods live in str_methods.cpp), and the
// template globals: range (MAX_RANGE 100000), dict, namespace, raise_exception, strftime_now.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",   "center",    "count",       "encode",    "endswith",     "expandtabs",   "find",
    "format",       "format_map", "index",     "isalnum",     "isalpha",   "isascii",      "isdecimal",    "isdigit",
    "isidentifier", "islower",    "isnumeric", "isprintable", "isspace",   "istitle",      "isupper",      "join",
    "ljust",        "lower",      "lstrip",    "maketrans",   "partition", "removeprefix", "removesuffix", "replace",
    "rfind",        "rindex",     "rjust",     "rpartition",  "rsplit",    "rstrip",       "split",        "splitlines",
    "startswith",   "strip",      "swapcase",  "title",       "translate", "upper",        "zfill"};
constexpr std::string_view kListSafe[] = {"copy", "count", "index"};
constexpr std::string_view kListUnsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
constexpr std::string_view kDictSafe[] = {"copy", "fromkeys", "get", "items", "keys", "values"};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
bool in_set(const std::string_view (&set)[N], std::string_view name) {
  return std::find(std::begin(set), std::end(set), name) != std::end(set);
}

Result<Value> list_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos) {
  const ListObj& l = self.as_list();
  std::vector<const Value*> a;
  if (name == "copy") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    return in.make_list(l.items, l.kind, pos);
  }
  if (name == "count") {
    PG_TRY(bind_args(args, {"value"}, 1, a, name, pos));
    CompareWork work = in.compare_work();
    int64_t n = 0;
    for (const Value& v : l.items) n += py_eq(v, *a[0], 0, &work) ? 1 : 0;
    PG_TRY(in.charge(work));
    return Value::integer(n);
  }
  if (name == "index") {
    PG_TRY(bind_args(args, {"value", "start", "stop"}, 1, a, name, pos));
    int64_t b, e;
    PG_TRY(start_end(a[1], a[2], static_cast<int64_t>(l.items.size()), b, e, pos));
    CompareWork work = in.compare_work();
    for (int64_t i = b; i < e && !work.over(); ++i)
      if (py_eq(l.items[static_cast<size_t>(i)], *a[0], 0, &work)) {
        PG_TRY(in.charge(work));
        return Value::integer(i);
      }
    PG_TRY(in.charge(work));
    return rt_error(pos, "{} is not in list", short_repr(*a[0]));
  }
  return unsupported("template error at {}:{}: {}.{}() is not supported", pos.line, pos.col, type_name(self), name);
}

Result<Value> dict_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos) {
  const DictObj& d = self.as_dict();
  std::vector<const Value*> a;
  if (name == "get") {
    PG_TRY(bind_args(args, {"key", "default"}, 1, a, name, pos));
    if (a[0]->is_str()) PG_TRY(in.charge_bytes(a[0]->sv().size()));  // the lookup copies the key
    if (!hash_key(*a[0])) return rt_error(pos, "unhashable type: '{}'", type_name(*a[0]));
    if (const Value* v = dict_get(d, *a[0])) return *v;
    return a[1] != nullptr ? *a[1] : Value::none();
  }
  if (name == "items" || name == "keys" || name == "values") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    std::vector<Value> items;
    items.reserve(d.items.size());
    for (const auto& [k, v] : d.items) {
      if (name == "keys") {
        items.push_back(k);
      } else if (name == "values") {
        items.push_back(v);
      } else {
        PG_ASSIGN_OR_RETURN(Value pair, in.make_list({k, v}, ListKind::kTuple, pos));
        items.push_back(std::move(pair));
      }
    }
    const ListKind kind = name == "keys"     ? ListKind::kDictKeys
                          : name == "values" ? ListKind::kDictValues
                                             : ListKind::kDictItems;
    return in.make_list(std::move(items), kind, pos);
  }
  if (name == "copy") {
    PG_TRY(bind_args(args, {}, 0, a, name, pos));
    return in.make_dict(d.items, pos);
  }
  return unsupported("template error at {}:{}: dict.{}() is not supported", pos.line, pos.col, name);
}

// dict(*args, **kwargs) as Python builds it: a mapping or iterable of pairs, then keywords.
Status dict_items_from_args(Interp& in, const CallArgs& args, std::string_view fname,
                            std::vector<std::pair<Value, Value>>& items, Pos pos) {
  if (args.pos.size() > 1) return rt_error(pos, "{} expected at most 1 argument, got {}", fname, args.pos.size());
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      items = src.as_dict().items;
    } else {
      PG_ASSIGN_OR_RETURN(std::vector<Value> seq, in.iterate(src, pos));
      for (const Value& e : seq) {
        PG_ASSIGN_OR_RETURN(std::vector<Value> kv, in.iterate(e, pos));
        if (kv.size() != 2)
          return rt_error(pos, "dictionary update sequence element has length {}; 2 is required", kv.size());
        items.emplace_back(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kw) items.emplace_back(Value::str(k, false), v);
  return ok_status();
}
}  // namespace

MethodLookup find_method(const Value& v, std::string_view name) {
  switch (v.kind()) {
    case Kind::kStr: return in_set(kStrMethods, name) ? MethodLookup::kSafe : MethodLookup::kNone;
    case Kind::kList: {
      const ListKind k = v.as_list().kind;
      if (k == ListKind::kList) {
        if (in_set(kListSafe, name)) return MethodLookup::kSafe;
        if (in_set(kListUnsafe, name)) return MethodLookup::kUnsafe;
      } else if (k == ListKind::kTuple || k == ListKind::kRange) {
        if (name == "count" || name == "index") return MethodLookup::kSafe;
      }
      return MethodLookup::kNone;
    }
    case Kind::kDict:
      if (in_set(kDictSafe, name)) return MethodLookup::kSafe;
      if (in_set(kDictUnsafe, name)) return MethodLookup::kUnsafe;
      return MethodLookup::kNone;
    default: return MethodLookup::kNone;
  }
}

Result<Value> call_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos) {
  PG_TRY(in.step());
  switch (self.kind()) {
    case Kind::kStr: return str_method(in, self, name, args, pos);
    case Kind::kList: return list_method(in, self, name, args, pos);
    case Kind::kDict: return dict_method(in, self, name, args, pos);
    default: return rt_error(pos, "'{}' object has no method '{}'", type_name(self), name);
  }
}

bool is_global_function(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now" || name == "lipsum" || name == "cycler" || name == "joiner";
}

Result<Value> call_global(Interp& in, const std::string& name, const CallArgs& args, Pos pos) {
  if (name == "range") {
    if (!args.kw.empty()) return rt_error(pos, "range() takes no keyword arguments");
    if (args.pos.empty() || args.pos.size() > 3)
      return rt_error(pos, "range expected at least 1 argument, got {}", args.pos.size());
    for (const Value& v : args.pos)
      if (!v.is_integral()) return rt_error(pos, "'{}' object cannot be interpreted as an integer", type_name(v));
    int64_t start = 0, stop, step = 1;
    if (args.pos.size() == 1) {
      stop = args.pos[0].as_int();
    } else {
      start = args.pos[0].as_int();
      stop = args.pos[1].as_int();
      if (args.pos.size() == 3) step = args.pos[2].as_int();
    }
    if (step == 0) return rt_error(pos, "range() arg 3 must not be zero");
    // len(range) computed without overflow; the sandbox refuses more than MAX_RANGE items.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
    const __int128 n = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
    constexpr int64_t kMaxRange = 100000;
    if (n > kMaxRange)
      return rt_error(pos, "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) items.push_back(Value::integer(start + i * step));
    PG_ASSIGN_OR_RETURN(Value r, in.make_list(std::move(items), ListKind::kRange, pos));
    auto& l = const_cast<ListObj&>(r.as_list());  // freshly made, not yet shared
    l.range_start = start;
    l.range_stop = stop;
    l.range_step = step;
    return r;
  }
  if (name == "dict" || name == "namespace") {
    std::vector<std::pair<Value, Value>> items;
    PG_TRY(dict_items_from_args(in, args, name, items, pos));
    if (name == "dict") return in.make_dict(std::move(items), pos);
    std::vector<std::pair<std::string, Value>> attrs;
    for (auto& [k, v] : items) attrs.emplace_back(to_str(k, in.str_limit()), std::move(v));
    return in.make_namespace(std::move(attrs), pos);
  }
  if (name == "raise_exception") {
    std::vector<const Value*> a;
    PG_TRY(bind_args(args, {"message"}, 1, a, name, pos));
    return invalid_argument("{}", to_str(*a[0], in.str_limit()));
  }
  if (name == "strftime_now") {
    std::vector<const Value*> a;
    PG_TRY(bind_args(args, {"format"}, 1, a, name, pos));
    if (!a[0]->is_str()) return rt_error(pos, "strftime() argument 1 must be str, not {}", type_name(*a[0]));
    // datetime.now() is naive: %z and %Z print nothing, %f prints the microseconds (0 here).
    std::string f;
    const std::string& src = a[0]->sv();
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '%' && i + 1 < src.size()) {
        const char c = src[i + 1];
        if (c == 'z' || c == 'Z') {
          ++i;
          continue;
        }
        if (c == 'f') {
          f += "000000";
          ++i;
          continue;
        }
        f.push_back('%');
        f.push_back(c);
        ++i;
        continue;
      }
      f.push_back(src[i]);
    }
    std::tm tm{};
    if (in.options().now) {
      tm = in.options().now();
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    if (f.empty()) return in.make_str("", false, pos);
    PG_TRY(in.charge_bytes(f.size() * 16));
    for (size_t cap = 256; cap <= in.options().limits.max_output_bytes + 256; cap *= 4) {
      std::string buf(cap, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
      if (n > 0) {
        buf.resize(n);
        return in.make_str(std::move(buf), false, pos);
      }
    }
    return resource_exhausted("template error at {}:{}: strftime_now() output exceeds max_output_bytes", pos.line,
                              pos.col);
  }
  return unsupported("template error at {}:{}: the global function '{}' is not supported", pos.line, pos.col, name);
}

}  // namespace pg::jinja
