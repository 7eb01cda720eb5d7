// Interp's value services: making strings/lists/dicts/namespaces under RenderLimits (size,
// memory, nesting), and the sandbox's lookups (jinja2/sandbox.py getattr/getitem, LoopContext
// attributes) plus Python iteration.
#include <algorithm>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

Result<Value> Interp::make_str(StrBuilder& b, Pos pos, bool markup) {
  if (b.size() > options_.limits.max_output_bytes)
    return resource_exhausted("template error at {}:{}: string of {} bytes exceeds max_output_bytes ({})", pos.line,
                              pos.col, b.size(), options_.limits.max_output_bytes);
  PG_TRY(charge_bytes(b.size()));
  if (tracker_.live_bytes + static_cast<int64_t>(b.bytes().capacity()) >
      static_cast<int64_t>(options_.limits.max_memory_bytes))
    return resource_exhausted("template error at {}:{}: rendering exceeded max_memory_bytes ({})", pos.line, pos.col,
                              options_.limits.max_memory_bytes);
  auto s = b.finish(&tracker_);
  s->markup = markup;
  return Value(StrP(std::move(s)));
}

Result<Value> Interp::make_str(std::string s, bool literal, Pos pos) {
  StrBuilder b;
  b.append(s, literal);
  return make_str(b, pos);
}

Status Interp::list_fits(size_t n, Pos pos) const {
  if (tracker_.live_bytes + static_cast<int64_t>(n * sizeof(Value)) > static_cast<int64_t>(options_.limits.max_memory_bytes))
    return resource_exhausted("template error at {}:{}: rendering exceeded max_memory_bytes ({})", pos.line, pos.col,
                              options_.limits.max_memory_bytes);
  return ok_status();
}

Result<Value> Interp::make_list(std::vector<Value> items, ListKind kind, Pos pos) {
  PG_TRY(step(items.size() / 8 + 1));
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, value_depth(v));
  if (depth + 1 > kMaxValueDepth)
    return resource_exhausted("template error at {}:{}: values nested deeper than {} levels", pos.line, pos.col,
                              kMaxValueDepth);
  const int64_t bytes = static_cast<int64_t>(items.capacity() * sizeof(Value));
  if (tracker_.live_bytes + bytes > static_cast<int64_t>(options_.limits.max_memory_bytes))
    return resource_exhausted("template error at {}:{}: rendering exceeded max_memory_bytes ({})", pos.line, pos.col,
                              options_.limits.max_memory_bytes);
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  l->kind = kind;
  l->depth = depth + 1;
  l->tracker = &tracker_;
  tracker_.live_bytes += bytes;
  return Value(ListP(std::move(l)));
}

Result<Value> Interp::make_dict(std::vector<std::pair<Value, Value>> items, Pos pos) {
  PG_TRY(step(items.size() / 8 + 1));
  auto d = std::make_shared<DictObj>();
  int depth = 0;
  for (auto& [k, v] : items) {
    auto key = hash_key(k);
    if (!key) return rt_error(pos, "unhashable type: '{}'", type_name(k));
    auto it = d->index.find(*key);
    if (it != d->index.end()) {
      d->items[it->second].second = std::move(v);  // Python keeps the first key, updates the value
      continue;
    }
    depth = std::max(depth, value_depth(v));
    d->index.emplace(std::move(*key), d->items.size());
    d->items.emplace_back(std::move(k), std::move(v));
  }
  for (const auto& kv : d->items) depth = std::max(depth, value_depth(kv.second));
  if (depth + 1 > kMaxValueDepth)
    return resource_exhausted("template error at {}:{}: values nested deeper than {} levels", pos.line, pos.col,
                              kMaxValueDepth);
  const int64_t bytes = static_cast<int64_t>(d->items.capacity() * 2 * sizeof(Value));
  if (tracker_.live_bytes + bytes > static_cast<int64_t>(options_.limits.max_memory_bytes))
    return resource_exhausted("template error at {}:{}: rendering exceeded max_memory_bytes ({})", pos.line, pos.col,
                              options_.limits.max_memory_bytes);
  d->depth = depth + 1;
  d->tracker = &tracker_;
  tracker_.live_bytes += bytes;
  return Value(DictP(std::move(d)));
}

Result<Value> Interp::make_namespace(std::vector<std::pair<std::string, Value>> attrs, Pos pos) {
  PG_TRY(step(attrs.size() + 1));
  auto ns = std::make_shared<NsObj>();
  for (auto& [k, v] : attrs) ns->set(k, std::move(v));
  namespaces_.push_back(ns);
  return Value(NsP(std::move(ns)));
}

void Interp::append_str(StrBuilder& b, const Value& v) {
  if (v.is_str())
    b.append(v.as_str());
  else
    b.append(to_str(v, str_limit()), false);
}

Result<Value> Interp::to_str_value(const Value& v, Pos pos) {
  if (v.is_str()) return v;
  StrBuilder b;
  append_str(b, v);
  return make_str(b, pos);
}

namespace {

Value method_value(const Value& obj, const std::string& name) {
  auto f = std::make_shared<FuncObj>();
  f->kind = FuncKind::kMethod;
  f->name = name;
  f->self = obj;
  return Value(FuncP(std::move(f)));
}

Value unsafe_undefined(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

Value loop_attribute(const Value& loop_value, const std::string& name) {
  const LoopObj& l = loop_value.as_loop();
  const int64_t len = static_cast<int64_t>(l.items->size());
  const int64_t i = static_cast<int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(len - i);
  if (name == "revindex0") return Value::integer(len - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == len - 1);
  if (name == "length") return Value::integer(len);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem")
    return i > 0 ? (*l.items)[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < len ? (*l.items)[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
  if (name == "cycle" || name == "changed") {
    auto f = std::make_shared<FuncObj>();
    f->kind = name == "cycle" ? FuncKind::kLoopCycle : FuncKind::kLoopChanged;
    f->name = name;
    f->self = loop_value;
    return Value(FuncP(std::move(f)));
  }
  return no_attribute(loop_value, name);
}

}  // namespace

Result<Value> Interp::getattr(const Value& obj, const std::string& name, Pos pos) {
  switch (obj.kind()) {
    case Kind::kUndefined: return undefined_error(obj, pos);
    case Kind::kNamespace: {
      if (const Value* v = obj.as_ns().find(name)) return *v;
      return no_attribute(obj, name);
    }
    case Kind::kLoop: return loop_attribute(obj, name);
    default: break;
  }
  switch (find_method(obj, name)) {
    case MethodLookup::kSafe: return method_value(obj, name);
    case MethodLookup::kUnsafe: return unsafe_undefined(obj, name);
    case MethodLookup::kNone: break;
  }
  if (obj.is_dict()) {  // attribute lookup falls back to the item
    if (const Value* v = obj.as_dict().find_str(name)) return *v;
  }
  return no_attribute(obj, name);
}

Result<Value> Interp::getitem(const Value& obj, const Value& key, Pos pos) {
  if (obj.is_undefined()) return undefined_error(obj, pos);
  if (obj.is_dict()) {
    if (key.is_str()) PG_TRY(charge_bytes(key.sv().size()));  // the lookup copies the key
    if (const Value* v = dict_get(obj.as_dict(), key)) return *v;
  } else if (key.is_integral() && (obj.is_str() || (obj.is_list() && obj.as_list().subscriptable()))) {
    int64_t i = key.as_int();
    if (obj.is_str()) {
      const Str& s = obj.as_str();
      if (!s.ascii) PG_TRY(charge_bytes(s.s.size()));  // code point indexing scans the string
      const int64_t n = s.ascii ? static_cast<int64_t>(s.s.size()) : static_cast<int64_t>(py::cp_count(s.s));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("str object has no element {}", key.as_int()));
      size_t b = static_cast<size_t>(i), e = b + 1;
      if (!s.ascii) {
        size_t off = 0;
        for (int64_t k = 0; k < i; ++k) py::next_cp(s.s, off);
        b = off;
        py::next_cp(s.s, off);
        e = off;
      }
      StrBuilder sb;
      sb.append(s, b, e);
      return make_str(sb, pos);
    }
    const auto& items = obj.as_list().items;
    const int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), key.as_int()));
    return items[static_cast<size_t>(i)];
  }
  if (key.is_str()) {  // item lookup falls back to the attribute
    if (obj.kind() == Kind::kNamespace || obj.kind() == Kind::kLoop) return getattr(obj, key.sv(), pos);
    switch (find_method(obj, key.sv())) {
      case MethodLookup::kSafe: return method_value(obj, key.sv());
      case MethodLookup::kUnsafe: return unsafe_undefined(obj, key.sv());
      case MethodLookup::kNone: break;
    }
    return no_attribute(obj, key.sv());
  }
  return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), short_repr(key)));
}

Result<std::vector<Value>> Interp::iterate(const Value& v, Pos pos) {
  switch (v.kind()) {
    case Kind::kUndefined: return std::vector<Value>{};
    case Kind::kStr: {
      const Str& s = v.as_str();
      // Each character becomes its own string object (~128 bytes with the Value).
      const size_t n_bytes = s.s.size() * 128;
      if (static_cast<int64_t>(n_bytes) + tracker_.live_bytes > static_cast<int64_t>(options_.limits.max_memory_bytes))
        return resource_exhausted("template error at {}:{}: iterating a string of {} bytes exceeds max_memory_bytes",
                                  pos.line, pos.col, s.s.size());
      PG_TRY(charge_bytes(s.s.size() * 8));
      std::vector<Value> out;
      for (size_t i = 0; i < s.s.size();) {
        const size_t b = i;
        py::next_cp(s.s, i);
        StrBuilder sb;
        sb.append(s, b, i);
        out.push_back(Value(StrP(sb.finish(nullptr))));
      }
      return out;
    }
    case Kind::kList: {
      const ListObj& l = v.as_list();
      PG_TRY(step(l.items.size() / 8 + 1));
      if (l.kind != ListKind::kIterator) return l.items;
      std::vector<Value> rest(l.items.begin() + static_cast<std::ptrdiff_t>(l.cursor), l.items.end());
      l.cursor = l.items.size();
      return rest;
    }
    case Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().items.size());
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      PG_TRY(step(keys.size() / 8 + 1));
      return keys;
    }
    case Kind::kLoop: return *v.as_loop().items;
    default: return rt_error(pos, "'{}' object is not iterable", type_name(v));
  }
}

}  // namespace pg::jinja
