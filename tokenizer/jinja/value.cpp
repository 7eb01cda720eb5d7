// Runtime values (see value.h): provenance strings, truthiness, str()/repr() as CPython prints them.
#include "tokenizer/jinja/value.h"

#include <fmt/format.h>

#include "tokenizer/jinja/py_text.h"

namespace pg::jinja {

bool Str::all_literal() const {
  for (const Run& r : runs)
    if (!r.literal) return false;
  return true;
}

bool Str::any_literal() const {
  for (const Run& r : runs)
    if (r.literal) return true;
  return false;
}

void StrBuilder::append(std::string_view text, bool literal) {
  if (text.empty()) return;
  s_.append(text);
  if (!runs_.empty() && runs_.back().literal == literal)
    runs_.back().end = s_.size();
  else
    runs_.push_back({s_.size(), literal});
}

void StrBuilder::append(const Str& src, size_t b, size_t e) {
  size_t run_begin = 0;
  for (const Run& r : src.runs) {
    const size_t lo = std::max(b, run_begin);
    const size_t hi = std::min(e, r.end);
    if (lo < hi) append(std::string_view(src.s).substr(lo, hi - lo), r.literal);
    run_begin = r.end;
    if (run_begin >= e) break;
  }
}

std::shared_ptr<Str> StrBuilder::finish(AllocTracker* tracker) {
  auto out = std::make_shared<Str>();
  out->s = std::move(s_);
  out->runs = std::move(runs_);
  out->ascii = py::is_ascii(out->s);
  out->tracker = tracker;
  if (tracker != nullptr) tracker->live_bytes += static_cast<int64_t>(out->s.capacity());
  s_.clear();
  runs_.clear();
  return out;
}

Value Value::str(std::string s, bool literal) {
  StrBuilder b;
  b.append(s, literal);
  return Value(StrP(b.finish(nullptr)));
}

const std::string& Value::undef_hint() const {
  static const std::string kEmpty;
  const auto& p = std::get<UndefP>(v_);
  return p ? p->hint : kEmpty;
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kStr: return std::get<StrP>(v_).get();
    case Kind::kList: return std::get<ListP>(v_).get();
    case Kind::kDict: return std::get<DictP>(v_).get();
    case Kind::kNamespace: return std::get<NsP>(v_).get();
    case Kind::kFunc: return std::get<FuncP>(v_).get();
    case Kind::kLoop: return std::get<LoopP>(v_).get();
    default: return nullptr;
  }
}

ListObj::~ListObj() {
  if (tracker != nullptr) tracker->live_bytes -= static_cast<int64_t>(items.capacity() * sizeof(Value));
}

DictObj::~DictObj() {
  if (tracker != nullptr) tracker->live_bytes -= static_cast<int64_t>(items.capacity() * 2 * sizeof(Value));
}

const Value* DictObj::find_str(std::string_view key) const {
  std::string k;
  k.reserve(key.size() + 1);
  k.push_back('s');
  k.append(key);
  auto it = index.find(k);
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* NsObj::find(std::string_view name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void NsObj::set(const std::string& name, Value v) {
  for (auto& [k, old] : attrs)
    if (k == name) {
      old = std::move(v);
      return;
    }
  attrs.emplace_back(name, std::move(v));
}

int value_depth(const Value& v) {
  if (v.is_list()) return v.as_list().depth;
  if (v.is_dict()) return v.as_dict().depth;
  return 0;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.as_bool();
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_double() != 0.0;
    case Kind::kStr: return !v.sv().empty();
    case Kind::kList: return !v.as_list().has_len() || !v.as_list().items.empty();
    case Kind::kDict: return !v.as_dict().items.empty();
    default: return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kList:
      switch (v.as_list().kind) {
        case ListKind::kList: return "list";
        case ListKind::kTuple: return "tuple";
        case ListKind::kIterator: return "generator";
        case ListKind::kDictKeys: return "dict_keys";
        case ListKind::kDictValues: return "dict_values";
        case ListKind::kDictItems: return "dict_items";
        case ListKind::kRange: return "range";
      }
      return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunc: return v.as_func().kind == FuncKind::kMacro ? "Macro" : "builtin_function_or_method";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

namespace {

void repr_into(std::string& out, const Value& v, int depth);

void seq_into(std::string& out, const std::vector<Value>& items, size_t from, const char* open, const char* close,
              int depth) {
  out += open;
  for (size_t i = from; i < items.size(); ++i) {
    if (i > from) out += ", ";
    repr_into(out, items[i], depth + 1);
  }
  out += close;
}

void str_into(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) {
    out += "...";
    return;
  }
  switch (v.kind()) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += py::float_repr(v.as_double()); return;
    case Kind::kStr: out += v.sv(); return;
    case Kind::kList: {
      const ListObj& l = v.as_list();
      switch (l.kind) {
        case ListKind::kList: seq_into(out, l.items, 0, "[", "]", depth); return;
        case ListKind::kTuple:
          seq_into(out, l.items, 0, "(", l.items.size() == 1 ? ",)" : ")", depth);
          return;
        case ListKind::kIterator: out += "<generator object>"; return;
        case ListKind::kDictKeys: seq_into(out, l.items, 0, "dict_keys([", "])", depth); return;
        case ListKind::kDictValues: seq_into(out, l.items, 0, "dict_values([", "])", depth); return;
        case ListKind::kDictItems: seq_into(out, l.items, 0, "dict_items([", "])", depth); return;
        case ListKind::kRange:
          out += fmt::format("range({}, {}", l.range_start, l.range_stop);
          if (l.range_step != 1) out += fmt::format(", {}", l.range_step);
          out += ")";
          return;
      }
      return;
    }
    case Kind::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, depth + 1);
        out += ": ";
        repr_into(out, val, depth + 1);
      }
      out += "}";
      return;
    }
    case Kind::kNamespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.as_ns().attrs) {
        if (!first) out += ", ";
        first = false;
        out += py::str_repr(k);
        out += ": ";
        repr_into(out, val, depth + 1);
      }
      out += "}>";
      return;
    }
    case Kind::kFunc: {
      const FuncObj& f = v.as_func();
      if (f.kind == FuncKind::kMacro)
        out += fmt::format("<Macro {}>", py::str_repr(f.name));
      else if (f.kind == FuncKind::kMethod)
        out += fmt::format("<built-in method {} of {} object>", f.name, type_name(f.self));
      else
        out += fmt::format("<built-in function {}>", f.name);
      return;
    }
    case Kind::kLoop: {
      const LoopObj& l = v.as_loop();
      out += fmt::format("<LoopContext {}/{}>", l.index0 + 1, l.items ? l.items->size() : 0);
      return;
    }
  }
}

void repr_into(std::string& out, const Value& v, int depth) {
  if (v.is_str()) {
    out += py::str_repr(v.sv());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    str_into(out, v, depth);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  std::string out;
  str_into(out, v, 0);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

}  // namespace pg::jinja
