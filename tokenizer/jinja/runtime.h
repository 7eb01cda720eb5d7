// Interpreter internals shared by the pg_jinja sources: scopes, call arguments, the Interp
// services (limits, value makers, attribute and item lookup, iteration), Python operators,
// methods and globals, constant folding and JSON. Not part of the public API.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace pg::jinja {

// One variable frame. Loop iterations, macro calls, caller() bodies and {% with %} get their own;
// `if` and plain blocks share the enclosing one (Jinja2's scoping).
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(std::string_view name) const {
    for (const auto& [k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopeP = std::shared_ptr<Scope>;

// Bytes and elements a comparison examined. Comparing big strings (or containers of them) is
// O(size): callers charge this to the step budget, and comparisons stop once it passes `cap`.
struct CompareWork {
  uint64_t used = 0;
  uint64_t cap = UINT64_MAX;
  bool over() const { return used > cap; }
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Stack the parser may use below its entry point. Nesting is bounded, but frames differ by build
// (sanitizers triple them); the guard turns any remaining overflow risk into an error. The
// interpreter's budget is RenderLimits::max_stack_bytes.
inline constexpr size_t kParseStackBytes = size_t{1} << 20;

// "template error at L:C: message" for runtime failures (TypeError, UndefinedError...).
template <typename... Args>
Status rt_error(Pos pos, fmt::format_string<Args...> f, Args&&... args) {
  return invalid_argument("template error at {}:{}: {}", pos.line, pos.col,
                          fmt::format(f, std::forward<Args>(args)...));
}
// The error an operation on an Undefined raises (UndefinedError).
Status undefined_error(const Value& v, Pos pos);

// Binds args to a Python-style signature `names`, the first n_required of them required.
// out[i] points at the bound value or is null when an optional parameter was not given.
Status bind_args(const CallArgs& args, std::initializer_list<std::string_view> names, size_t n_required,
                 std::vector<const Value*>& out, std::string_view fname, Pos pos);

class Interp {
 public:
  explicit Interp(const RenderOptions& options);
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  // Renders program with `context` (its top-level variables) into out.
  Status render(const Program& program, const Value& context, StrBuilder& out);
  // jinja2's Expr.as_const: evaluates e without a context. Fails for names, calls and filters
  // that need the render context; slicing fails soft (the sandbox's getitem gives Undefined).
  Result<Value> eval_const(const Expr& e);

  // --- services for filters, methods and operators ---
  const RenderOptions& options() const { return options_; }
  AllocTracker* tracker() { return &tracker_; }
  // Cap for to_str/to_repr: one byte past the largest string a render may make.
  size_t str_limit() const { return options_.limits.max_output_bytes + 1; }
  Status step(uint64_t n = 1) {
    steps_ += n;
    if (steps_ > options_.limits.max_steps) return steps_exceeded();
    return ok_status();
  }
  // Charges bulk work: one step per 64 bytes.
  Status charge_bytes(size_t n) { return step(n / 64 + 1); }
  // A comparison budget worth the steps left, and its charge once the comparison ran.
  CompareWork compare_work() const {
    CompareWork w;
    w.cap = (options_.limits.max_steps > steps_ ? options_.limits.max_steps - steps_ : 0) * 64;
    return w;
  }
  Status charge(const CompareWork& w) { return w.over() ? steps_exceeded() : charge_bytes(w.used); }
  Result<Value> make_str(StrBuilder& b, Pos pos, bool markup = false);
  Result<Value> make_str(std::string s, bool literal, Pos pos);
  Result<Value> make_list(std::vector<Value> items, ListKind kind, Pos pos);
  // Whether a list of n items would fit the memory bound make_list checks, asked before building it.
  Status list_fits(size_t n, Pos pos) const;
  Result<Value> make_dict(std::vector<std::pair<Value, Value>> items, Pos pos);
  Result<Value> make_namespace(std::vector<std::pair<std::string, Value>> attrs, Pos pos);

  Result<Value> call(const Value& fn, const CallArgs& args, Pos pos);
  // jinja2 SandboxedEnvironment.getattr / getitem.
  Result<Value> getattr(const Value& obj, const std::string& name, Pos pos);
  Result<Value> getitem(const Value& obj, const Value& key, Pos pos);
  // Python iter(v) materialised; consumes single-pass iterators. Undefined iterates as empty.
  Result<std::vector<Value>> iterate(const Value& v, Pos pos);
  // str(v) with provenance kept for strings (other values print as data).
  void append_str(StrBuilder& b, const Value& v);
  Result<Value> to_str_value(const Value& v, Pos pos);

  Result<Value> apply_filter(int fn, const Value& input, const CallArgs& args, Pos pos);
  Result<bool> apply_test(int fn, const Value& input, const CallArgs& args, Pos pos);

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };
  Status steps_exceeded() const;
  Status exec_body(const std::vector<StmtPtr>& body, const ScopeP& scope, StrBuilder& out);
  Status exec(const Stmt& s, const ScopeP& scope, StrBuilder& out);
  Status exec_for(const Stmt& s, const ScopeP& scope, StrBuilder& out);
  Status exec_call_block(const Stmt& s, const ScopeP& scope, StrBuilder& out);
  Status capture(const std::vector<StmtPtr>& body, const ScopeP& scope, Value& result, Pos pos);
  Status assign(const Expr& target, const Value& v, const ScopeP& scope);
  Result<Value> eval(const Expr& e, const ScopeP& scope);
  // eval()'s cases, kept out of line (see eval) so recursion uses small frames.
#define PG_JINJA_EVAL(name) __attribute__((noinline)) Result<Value> name(const Expr& e, const ScopeP& scope)
  PG_JINJA_EVAL(eval_getattr);
  PG_JINJA_EVAL(eval_getitem);
  PG_JINJA_EVAL(eval_slice);
  PG_JINJA_EVAL(eval_test);
  PG_JINJA_EVAL(eval_unary);
  PG_JINJA_EVAL(eval_binary);
  PG_JINJA_EVAL(eval_logic);
  PG_JINJA_EVAL(eval_concat);
  PG_JINJA_EVAL(eval_compare);
  PG_JINJA_EVAL(eval_cond);
  PG_JINJA_EVAL(eval_literal);
#undef PG_JINJA_EVAL
  __attribute__((noinline)) Result<Value> eval_call(const Expr& e, const ScopeP& scope);
  __attribute__((noinline)) Result<Value> eval_filter(const Expr& e, const ScopeP& scope);
  Status eval_args(const Expr& e, const ScopeP& scope, CallArgs& args);
  Value lookup(const std::string& name, const ScopeP& scope) const;
  Result<Value> call_macro(const FuncObj& f, const CallArgs& args, Pos pos);
  Result<Value> call_loop_fn(const FuncObj& f, const CallArgs& args, Pos pos);
  static Status not_constant();
  Status stack_check() const;

  AllocTracker tracker_;  // first member: destroyed last, after every tracked value
  const RenderOptions& options_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  Flow flow_ = Flow::kNormal;
  uintptr_t stack_base_ = 0;            // address near the bottom of the render's stack (see stack_check)
  bool const_mode_ = false;             // eval_const: names, calls and context filters are not constant
  bool lenient_slices_ = false;         // evaluating a folded constant (see eval_folded)
  const Expr* strict_ = nullptr;        // re-evaluating this folded constant at render time
  const Expr* print_root_ = nullptr;    // the expression of the {{ }} being printed
  const Value* block_input_ = nullptr;  // the captured body a {% filter %} / {% set %} block filters
  Value context_;
  ScopeP root_;
  std::vector<NsP> namespaces_;  // cleared at the end, breaking reference cycles through them
};

// --- Python operators (operators.cpp) ---
Result<Value> binary_op(Interp& in, BinOp op, const Value& a, const Value& b, Pos pos);
Result<Value> unary_minus(const Value& a, Pos pos, bool negate);
// ==, with Python's numeric tower and container equality.
bool py_eq(const Value& a, const Value& b, int depth = 0, CompareWork* work = nullptr);
// <: numbers, strings, lists/tuples lexicographically; other pairs are a TypeError.
Result<bool> py_lt(const Value& a, const Value& b, Pos pos, int depth = 0, CompareWork* work = nullptr);
Result<bool> compare(Interp& in, CmpOp op, const Value& a, const Value& b, Pos pos);
// `a in b`.
Result<bool> contains(Interp& in, const Value& container, const Value& item, Pos pos);
// A dict key's identity (1, 1.0 and True are one key); nullopt for unhashable values (and for
// tuple keys past 64 MiB).
std::optional<std::string> hash_key(const Value& v, int depth = 0);
const Value* dict_get(const DictObj& d, const Value& key);
// Python slice indices for a sequence of length n; bounds = slice.indices(n) (start, stop, step).
Status slice_indices(const Value& start, const Value& stop, const Value& step, int64_t n, std::vector<int64_t>& out,
                     Pos pos, bool& type_error, int64_t bounds[3] = nullptr);
// Python int(str) parsing (whitespace, sign, underscores); false when not an integer literal.
bool parse_py_int(std::string_view s, int base, int64_t& out);
bool parse_py_float(std::string_view s, double& out);
// snprintf(fmt, v) into a string of whatever length it needs.
std::string cformat(const std::string& fmt, long long v);
std::string cformat(const std::string& fmt, double v);
std::string cformat(const std::string& fmt, int precision, double v);

// --- str / list / dict methods and globals (methods.cpp) ---
enum class MethodLookup : uint8_t { kNone, kSafe, kUnsafe };
// Whether `name` is a Python attribute of v that is a method (kUnsafe: mutates, and the immutable
// sandbox refuses it).
MethodLookup find_method(const Value& v, std::string_view name);
Result<Value> call_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos);
Result<Value> str_method(Interp& in, const Value& self, const std::string& name, const CallArgs& args, Pos pos);
// Python's optional start/end arguments (find, count, index...) clamped to [0, n] like slices.
Status start_end(const Value* start, const Value* end, int64_t n, int64_t& b, int64_t& e, Pos pos);
// Default globals: range, dict, namespace, raise_exception, strftime_now (+ Jinja's lipsum,
// cycler, joiner, which we do not implement).
bool is_global_function(std::string_view name);
Result<Value> call_global(Interp& in, const std::string& name, const CallArgs& args, Pos pos);

// markupsafe.escape of s's text into b, run by run (provenance kept).
void escape_into(StrBuilder& b, const Str& s);

// --- constant folding (optimizer.cpp) ---
// What jinja2's Optimizer and CodeGenerator.visit_Output evaluate at compile time: constant
// subtrees whose value has a safe repr become constants, and constant {{ }} expressions become
// text. Runs once after parsing; a subtree whose folding fails is left to the render.
void fold_constants(Program& program);

// --- JSON (json_io.cpp) ---
struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  size_t max_bytes = SIZE_MAX;  // fail once the output passes this
};
// Python json.dumps(v, ...) byte for byte.
Status json_dump(const Value& v, const DumpOptions& opts, std::string& out, Pos pos);
template <typename Json>
Result<Value> from_json(const Json& j, bool literal, int depth = 0);

}  // namespace pg::jinja
