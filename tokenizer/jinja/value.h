// Runtime values of the Jinja interpreter: the Python objects a chat template meets (None, bool,
// int, float, str, list/tuple/iterators, dict, Jinja's Undefined/Namespace/LoopContext/Macro).
// Strings carry provenance runs (template literal text vs. data) for Template::render_segments.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace pg::jinja {

// Live bytes held by strings and lists made while rendering; bounded by RenderLimits.
struct AllocTracker {
  int64_t live_bytes = 0;
};

// [.., end) byte run of a string: literal = it came from the template's own text.
struct Run {
  size_t end;
  bool literal;
};

// An immutable string with provenance. runs cover [0, s.size()); empty iff s is empty.
struct Str {
  std::string s;
  std::vector<Run> runs;
  bool ascii = true;    // every byte < 0x80: byte offsets are code point offsets
  bool markup = false;  // markupsafe.Markup (from safe / escape): repr differs, `+` escapes
  AllocTracker* tracker = nullptr;
  Str() = default;
  Str(const Str&) = delete;
  Str& operator=(const Str&) = delete;
  ~Str() {
    if (tracker != nullptr) tracker->live_bytes -= static_cast<int64_t>(s.capacity());
  }
  // Whether every byte is literal (an empty string counts as literal).
  bool all_literal() const;
  bool any_literal() const;
};

// Builds a Str run by run; adjacent runs with the same flag merge.
class StrBuilder {
 public:
  void append(std::string_view text, bool literal);
  // Appends bytes [b, e) of src with their provenance.
  void append(const Str& src, size_t b, size_t e);
  void append(const Str& src) { append(src, 0, src.s.size()); }
  size_t size() const { return s_.size(); }
  std::string& bytes() { return s_; }
  const std::string& bytes() const { return s_; }
  const std::vector<Run>& runs() const { return runs_; }
  std::shared_ptr<Str> finish(AllocTracker* tracker);

 private:
  std::string s_;
  std::vector<Run> runs_;
};

class Value;
struct ListObj;
struct DictObj;
struct NsObj;
struct FuncObj;
struct LoopObj;

// Undefined: hint is the message an operation on it raises ("'x' is undefined").
struct Undef {
  std::string hint;
};
struct NoneT {};

using StrP = std::shared_ptr<const Str>;
using ListP = std::shared_ptr<const ListObj>;
using DictP = std::shared_ptr<const DictObj>;
using NsP = std::shared_ptr<NsObj>;
using FuncP = std::shared_ptr<const FuncObj>;
using LoopP = std::shared_ptr<LoopObj>;
using UndefP = std::shared_ptr<const Undef>;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kNamespace, kFunc, kLoop };

class Value {
 public:
  Value() : v_(UndefP{}) {}
  static Value undefined(std::string hint) { return Value(std::make_shared<const Undef>(Undef{std::move(hint)})); }
  static Value none() { return Value(NoneT{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  // A string constant with uniform provenance; not tracked against the render's memory limit.
  static Value str(std::string s, bool literal);
  explicit Value(StrP s) : v_(std::move(s)) {}
  explicit Value(ListP l) : v_(std::move(l)) {}
  explicit Value(DictP d) : v_(std::move(d)) {}
  explicit Value(NsP n) : v_(std::move(n)) {}
  explicit Value(FuncP f) : v_(std::move(f)) {}
  explicit Value(LoopP l) : v_(std::move(l)) {}

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_str() const { return kind() == Kind::kStr; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  // bool counts as an int, as in Python.
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_number() const { return is_int() || is_bool() || is_float(); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const Str& as_str() const { return *std::get<StrP>(v_); }
  const StrP& str_ptr() const { return std::get<StrP>(v_); }
  const std::string& sv() const { return std::get<StrP>(v_)->s; }
  const ListObj& as_list() const { return *std::get<ListP>(v_); }
  const ListP& list_ptr() const { return std::get<ListP>(v_); }
  const DictObj& as_dict() const { return *std::get<DictP>(v_); }
  const DictP& dict_ptr() const { return std::get<DictP>(v_); }
  NsObj& as_ns() const { return *std::get<NsP>(v_); }
  const FuncObj& as_func() const { return *std::get<FuncP>(v_); }
  LoopObj& as_loop() const { return *std::get<LoopP>(v_); }
  // The hint of an Undefined ("" when none was recorded).
  const std::string& undef_hint() const;
  // Identity of heap objects (namespace, function, loop, iterator) for `is`/==.
  const void* identity() const;

 private:
  explicit Value(UndefP u) : v_(std::move(u)) {}
  explicit Value(NoneT n) : v_(n) {}
  explicit Value(bool b) : v_(b) {}
  explicit Value(int64_t i) : v_(i) {}
  explicit Value(double d) : v_(d) {}
  std::variant<UndefP, NoneT, bool, int64_t, double, StrP, ListP, DictP, NsP, FuncP, LoopP> v_;
};

// What a list-like object is in Python terms; it decides printing, len() and subscripting.
enum class ListKind : uint8_t {
  kList,
  kTuple,
  kIterator,  // generator / list_reverseiterator: single pass, no len, always truthy
  kDictKeys,
  kDictValues,
  kDictItems,
  kRange,
};

struct ListObj {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  int depth = 1;              // container nesting depth (1 = no nested containers)
  mutable size_t cursor = 0;  // kIterator: items before cursor were consumed
  int64_t range_start = 0, range_stop = 0, range_step = 1;
  AllocTracker* tracker = nullptr;
  ~ListObj();
  bool subscriptable() const { return kind == ListKind::kList || kind == ListKind::kTuple || kind == ListKind::kRange; }
  bool has_len() const { return kind != ListKind::kIterator; }
};

// Python dict: insertion ordered, indexed by hash_key() (runtime.h) of each key.
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;
  int depth = 1;
  AllocTracker* tracker = nullptr;
  ~DictObj();
  const Value* find_str(std::string_view key) const;
};

// jinja2.utils.Namespace: the one mutable object templates have (`{% set ns.x = ... %}`).
struct NsObj {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value v);
};

enum class FuncKind : uint8_t { kBuiltin, kMethod, kMacro, kLoopCycle, kLoopChanged };

struct Stmt;
struct Scope;

// Something callable: a global (range, namespace...), a bound method of a str/list/dict, a
// macro (or a call block's caller), or loop.cycle / loop.changed.
struct FuncObj {
  FuncKind kind = FuncKind::kBuiltin;
  std::string name;
  Value self;                    // kMethod: the object; kLoopCycle/kLoopChanged: the loop
  const Stmt* macro = nullptr;   // kMacro: the macro or call-block statement
  std::weak_ptr<Scope> closure;  // kMacro: the scope it was defined in (weak: no cycles)
};

// jinja2.runtime.LoopContext for the iteration in progress.
struct LoopObj {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
  bool changed_seen = false;
  std::vector<Value> changed_last;
};

// Containers nest at most this deep; deeper ones are refused where they are made, so printing,
// comparing and destroying values never recurses without bound.
inline constexpr int kMaxValueDepth = 200;

// A container's nesting depth for the limit on value nesting.
int value_depth(const Value& v);
// Python truthiness.
bool truthy(const Value& v);
// Python type name as error messages show it ("str", "int", "dict", "NoneType"...).
std::string type_name(const Value& v);
// Python str(v) and repr(v); containers print their items with repr. Output stops growing once
// it passes max_bytes (callers compare the size against their limit), so printing a list that
// holds one huge string many times cannot exhaust memory.
std::string to_str(const Value& v, size_t max_bytes);
std::string to_repr(const Value& v, size_t max_bytes);
// For error messages: at most ~200 bytes.
std::string short_repr(const Value& v);

}  // namespace pg::jinja
