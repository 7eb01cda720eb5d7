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

// str()/repr() writer. Output stops growing past `max` (callers compare sizes). Like CPython's
// Py_ReprEnter, a list/dict/namespace already being printed prints as [...] / {...}, so
// self-containing namespaces print finitely; kMaxValueDepth bounds the recursion regardless.
class Printer {
 public:
  Printer(std::string& out, size_t max) : out_(out), max_(max) {}

  void str(const Value& v) {
    if (full()) return;
    if (v.is_str()) {
      out_.append(v.sv(), 0, std::min(v.sv().size(), room()));
    } else if (v.is_undefined()) {
      return;
    } else {
      object(v);
    }
  }

  void repr(const Value& v) {
    if (full()) return;
    if (v.is_str()) {
      if (v.sv().size() >= room()) {
        out_.append(room(), '.');  // over the limit anyway; skip quoting it
        return;
      }
      if (v.as_str().markup) out_ += "Markup(";
      out_ += py::str_repr(v.sv());
      if (v.as_str().markup) out_ += ")";
    } else if (v.is_undefined()) {
      out_ += "Undefined";
    } else {
      object(v);
    }
  }

 private:
  bool full() const { return out_.size() > max_; }
  size_t room() const {
    const size_t r = max_ - out_.size();
    return r == SIZE_MAX ? r : r + 1;  // one past max, so an overflow shows
  }
  // Enters a container; false when it is already being printed (or nesting is too deep).
  bool enter(const void* id) {
    if (active_.size() > static_cast<size_t>(kMaxValueDepth)) return false;
    for (const void* a : active_)
      if (a == id) return false;
    active_.push_back(id);
    return true;
  }

  void seq(const ListObj& l, const char* open, const char* close) {
    out_ += open;
    for (size_t i = 0; i < l.items.size() && !full(); ++i) {
      if (i > 0) out_ += ", ";
      repr(l.items[i]);
    }
    out_ += close;
  }

  void object(const Value& v) {
    switch (v.kind()) {
      case Kind::kNone: out_ += "None"; return;
      case Kind::kBool: out_ += v.as_bool() ? "True" : "False"; return;
      case Kind::kInt: out_ += std::to_string(v.as_int()); return;
      case Kind::kFloat: out_ += py::float_repr(v.as_double()); return;
      case Kind::kList: list(v); return;
      case Kind::kDict: {
        if (!enter(v.identity())) {
          out_ += "{...}";
          return;
        }
        out_ += "{";
        bool first = true;
        for (const auto& [k, val] : v.as_dict().items) {
          if (full()) break;
          if (!first) out_ += ", ";
          first = false;
          repr(k);
          out_ += ": ";
          repr(val);
        }
        out_ += "}";
        active_.pop_back();
        return;
      }
      case Kind::kNamespace: {
        if (!enter(v.identity())) {
          out_ += "<Namespace {...}>";
          return;
        }
        out_ += "<Namespace {";
        bool first = true;
        for (const auto& [k, val] : v.as_ns().attrs) {
          if (full()) break;
          if (!first) out_ += ", ";
          first = false;
          out_ += py::str_repr(k);
          out_ += ": ";
          repr(val);
        }
        out_ += "}>";
        active_.pop_back();
        return;
      }
      case Kind::kFunc: {
        const FuncObj& f = v.as_func();
        if (f.kind == FuncKind::kMacro)
          out_ += fmt::format("<Macro {}>", py::str_repr(f.name));
        else if (f.kind == FuncKind::kMethod)
          out_ += fmt::format("<built-in method {} of {} object>", f.name, type_name(f.self));
        else
          out_ += fmt::format("<built-in function {}>", f.name);
        return;
      }
      case Kind::kLoop: {
        const LoopObj& l = v.as_loop();
        out_ += fmt::format("<LoopContext {}/{}>", l.index0 + 1, l.items ? l.items->size() : 0);
        return;
      }
      default: return;
    }
  }

  void list(const Value& v) {
    const ListObj& l = v.as_list();
    if (l.kind == ListKind::kRange) {
      out_ += fmt::format("range({}, {}", l.range_start, l.range_stop);
      if (l.range_step != 1) out_ += fmt::format(", {}", l.range_step);
      out_ += ")";
      return;
    }
    if (l.kind == ListKind::kIterator) {
      out_ += "<generator object>";
      return;
    }
    if (!enter(v.identity())) {
      out_ += l.kind == ListKind::kTuple ? "(...)" : "[...]";
      return;
    }
    switch (l.kind) {
      case ListKind::kTuple: seq(l, "(", l.items.size() == 1 ? ",)" : ")"); break;
      case ListKind::kDictKeys: seq(l, "dict_keys([", "])"); break;
      case ListKind::kDictValues: seq(l, "dict_values([", "])"); break;
      case ListKind::kDictItems: seq(l, "dict_items([", "])"); break;
      default: seq(l, "[", "]"); break;
    }
    active_.pop_back();
  }

  std::string& out_;
  size_t max_;
  std::vector<const void*> active_;
};

}  // namespace

std::string to_str(const Value& v, size_t max_bytes) {
  std::string out;
  Printer(out, max_bytes).str(v);
  return out;
}

std::string to_repr(const Value& v, size_t max_bytes) {
  std::string out;
  Printer(out, max_bytes).repr(v);
  return out;
}

std::string short_repr(const Value& v) {
  std::string s = to_repr(v, 200);
  if (s.size() > 200) {
    s.resize(200);
    s += "...";
  }
  return s;
}

}  // namespace pg::jinja
