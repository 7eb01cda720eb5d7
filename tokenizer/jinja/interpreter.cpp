// Tree-walking interpreter (jinja2/compiler.py semantics): statements, expressions, scopes,
// macros and caller(), loops with LoopContext, compile-time constant evaluation (eval_const).
#include <algorithm>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

Status undefined_error(const Value& v, Pos pos) {
  const std::string& hint = v.undef_hint();
  return rt_error(pos, "{}", hint.empty() ? std::string("undefined value") : hint);
}

Status bind_args(const CallArgs& args, std::initializer_list<std::string_view> names, size_t n_required,
                 std::vector<const Value*>& out, std::string_view fname, Pos pos) {
  out.assign(names.size(), nullptr);
  if (args.pos.size() > names.size())
    return rt_error(pos, "{}() takes at most {} argument(s) ({} given)", fname, names.size(), args.pos.size());
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = &args.pos[i];
  for (const auto& [k, v] : args.kw) {
    auto it = std::find(names.begin(), names.end(), std::string_view(k));
    if (it == names.end()) return rt_error(pos, "{}() got an unexpected keyword argument '{}'", fname, k);
    const size_t i = static_cast<size_t>(it - names.begin());
    if (out[i] != nullptr) return rt_error(pos, "{}() got multiple values for argument '{}'", fname, k);
    out[i] = &v;
  }
  for (size_t i = 0; i < n_required; ++i)
    if (out[i] == nullptr) return rt_error(pos, "{}() missing required argument '{}'", fname, *(names.begin() + i));
  return ok_status();
}

Interp::Interp(const RenderOptions& options) : options_(options) {}

Interp::~Interp() {
  // Namespaces are the only mutable objects, so the only way to build reference cycles.
  for (auto& ns : namespaces_) ns->attrs.clear();
}

Status Interp::steps_exceeded() const {
  return resource_exhausted("template rendering exceeded max_steps ({})", options_.limits.max_steps);
}

Status Interp::stack_check() const {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (stack_base_ > here && stack_base_ - here > options_.limits.max_stack_bytes)
    return resource_exhausted("template nesting exceeds max_stack_bytes ({})", options_.limits.max_stack_bytes);
  return ok_status();
}

Status Interp::render(const Program& program, const Value& context, StrBuilder& out) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  context_ = context;
  root_ = std::make_shared<Scope>();
  return exec_body(program.body, root_, out);
}

Result<Value> Interp::eval_const(const Expr& e) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const_mode_ = true;
  auto v = eval(e, nullptr);
  const_mode_ = false;
  return v;
}

Status Interp::not_constant() { return failed_precondition("expression is not constant"); }
Value Interp::lookup(const std::string& name, const ScopeP& scope) const {
  for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get())
    if (const Value* v = s->find(name)) return *v;
  if (context_.is_dict())
    if (const Value* v = context_.as_dict().find_str(name)) return *v;
  if (is_global_function(name)) {
    auto f = std::make_shared<FuncObj>();
    f->kind = FuncKind::kBuiltin;
    f->name = name;
    return Value(FuncP(std::move(f)));
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// --- statements ---

Status Interp::exec_body(const std::vector<StmtPtr>& body, const ScopeP& scope, StrBuilder& out) {
  for (const auto& s : body) {
    PG_TRY(exec(*s, scope, out));
    if (flow_ != Flow::kNormal) return ok_status();
  }
  return ok_status();
}

Status Interp::capture(const std::vector<StmtPtr>& body, const ScopeP& scope, Value& result, Pos pos) {
  auto inner = std::make_shared<Scope>();
  inner->parent = scope;
  StrBuilder b;
  PG_TRY(exec_body(body, inner, b));
  PG_ASSIGN_OR_RETURN(result, make_str(b, pos));
  return ok_status();
}

Status Interp::exec(const Stmt& s, const ScopeP& scope, StrBuilder& out) {
  PG_TRY(step());
  PG_TRY(stack_check());
  switch (s.kind) {
    case StmtKind::kText: out.append(s.text.as_str()); break;
    case StmtKind::kPrint:
      for (const auto& e : s.exprs) {
        PG_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
        append_str(out, v);
      }
      break;
    case StmtKind::kIf: {
      const Stmt* node = &s;
      while (true) {
        PG_ASSIGN_OR_RETURN(Value test, eval(*node->exprs[0], scope));
        if (truthy(test)) return exec_body(node->body, scope, out);
        // elif chains are nested Ifs alone in an else body: walk them without recursing.
        if (node->else_body.size() == 1 && node->else_body[0]->kind == StmtKind::kIf &&
            node->else_body[0]->name == "elif") {
          node = node->else_body[0].get();
          PG_TRY(step());
          continue;
        }
        return exec_body(node->else_body, scope, out);
      }
    }
    case StmtKind::kFor: PG_TRY(exec_for(s, scope, out)); break;
    case StmtKind::kSet: {
      PG_ASSIGN_OR_RETURN(Value v, eval(*s.exprs[0], scope));
      PG_TRY(assign(*s.target, v, scope));
      break;
    }
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      Value body;
      PG_TRY(capture(s.body, scope, body, s.pos));
      if (!s.exprs.empty()) {
        const Value* saved = block_input_;
        block_input_ = &body;
        auto filtered = eval(*s.exprs[0], scope);
        block_input_ = saved;
        if (!filtered.ok()) return filtered.status();
        body = std::move(filtered).value();
      }
      if (s.kind == StmtKind::kSetBlock) {
        PG_TRY(assign(*s.target, body, scope));
      } else {
        append_str(out, body);
      }
      break;
    }
    case StmtKind::kMacro: {
      auto f = std::make_shared<FuncObj>();
      f->kind = FuncKind::kMacro;
      f->name = s.name;
      f->macro = &s;
      f->closure = scope;
      scope->set(s.name, Value(FuncP(std::move(f))));
      break;
    }
    case StmtKind::kCallBlock: PG_TRY(exec_call_block(s, scope, out)); break;
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& e : s.exprs) {
        PG_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
        values.push_back(std::move(v));
      }
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < s.targets.size(); ++i) PG_TRY(assign(*s.targets[i], values[i], inner));
      PG_TRY(exec_body(s.body, inner, out));
      break;
    }
    case StmtKind::kScope: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      PG_TRY(exec_body(s.body, inner, out));
      break;
    }
    case StmtKind::kBreak: flow_ = Flow::kBreak; break;
    case StmtKind::kContinue: flow_ = Flow::kContinue; break;
  }
  if (out.size() > options_.limits.max_output_bytes)
    return resource_exhausted("template error at {}:{}: output exceeds max_output_bytes ({})", s.pos.line, s.pos.col,
                              options_.limits.max_output_bytes);
  return ok_status();
}

Status Interp::exec_for(const Stmt& s, const ScopeP& scope, StrBuilder& out) {
  PG_ASSIGN_OR_RETURN(Value iterable, eval(*s.exprs[0], scope));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable, s.exprs[0]->pos));
  if (s.exprs.size() > 1) {  // for x in y if cond
    std::vector<Value> kept;
    for (Value& item : items) {
      auto test_scope = std::make_shared<Scope>();
      test_scope->parent = scope;
      PG_TRY(assign(*s.target, item, test_scope));
      PG_ASSIGN_OR_RETURN(Value keep, eval(*s.exprs[1], test_scope));
      if (truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // Jinja2 clears its "else" indicator at the end of the loop body, so `else` also runs when
  // every iteration left early through break or continue.
  bool body_completed = false;
  auto loop = std::make_shared<LoopObj>();
  loop->items = std::make_shared<const std::vector<Value>>(std::move(items));
  const Value loop_value{LoopP(loop)};
  for (size_t i = 0; i < loop->items->size(); ++i) {
    PG_TRY(step());
    loop->index0 = i;
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    PG_TRY(assign(*s.target, (*loop->items)[i], inner));
    inner->set("loop", loop_value);
    PG_TRY(exec_body(s.body, inner, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    if (flow_ == Flow::kNormal) body_completed = true;
    flow_ = Flow::kNormal;
  }
  if (body_completed || s.else_body.empty()) return ok_status();
  auto inner = std::make_shared<Scope>();
  inner->parent = scope;
  return exec_body(s.else_body, inner, out);
}

Status Interp::exec_call_block(const Stmt& s, const ScopeP& scope, StrBuilder& out) {
  auto caller = std::make_shared<FuncObj>();
  caller->kind = FuncKind::kMacro;
  caller->name = "caller";
  caller->macro = &s;
  caller->closure = scope;
  const Expr& call = *s.exprs[0];
  CallArgs args;
  PG_TRY(eval_args(call, scope, args));
  args.kw.emplace_back("caller", Value(FuncP(std::move(caller))));
  PG_ASSIGN_OR_RETURN(Value fn, eval(*call.args[0], scope));
  PG_ASSIGN_OR_RETURN(Value result, this->call(fn, args, call.pos));
  append_str(out, result);
  return ok_status();
}

Status Interp::assign(const Expr& target, const Value& v, const ScopeP& scope) {
  switch (target.kind) {
    case ExprKind::kName: scope->set(target.name, v); return ok_status();
    case ExprKind::kNsRef: {
      Value ns = lookup(target.name, scope);
      if (ns.kind() != Kind::kNamespace) return rt_error(target.pos, "cannot assign attribute on non-namespace object");
      PG_TRY(step());
      ns.as_ns().set(target.attr, v);
      return ok_status();
    }
    case ExprKind::kTuple: {
      PG_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(v, target.pos));
      if (parts.size() > target.args.size())
        return rt_error(target.pos, "too many values to unpack (expected {})", target.args.size());
      if (parts.size() < target.args.size())
        return rt_error(target.pos, "not enough values to unpack (expected {}, got {})", target.args.size(),
                        parts.size());
      for (size_t i = 0; i < parts.size(); ++i) PG_TRY(assign(*target.args[i], parts[i], scope));
      return ok_status();
    }
    default: return rt_error(target.pos, "can't assign to this expression");
  }
}

// --- expressions ---

Status Interp::eval_args(const Expr& e, const ScopeP& scope, CallArgs& args) {
  for (size_t i = 1; i < e.args.size(); ++i) {
    PG_ASSIGN_OR_RETURN(Value v, eval(*e.args[i], scope));
    args.pos.push_back(std::move(v));
  }
  for (const auto& [k, ke] : e.kwargs) {
    PG_ASSIGN_OR_RETURN(Value v, eval(*ke, scope));
    args.kw.emplace_back(k, std::move(v));
  }
  return ok_status();
}

// eval() only dispatches: each kind has its own out-of-line function, so a deeply nested
// expression costs one small frame per level instead of one frame sized for every case.
Result<Value> Interp::eval(const Expr& e, const ScopeP& scope) {
  PG_TRY(step());
  PG_TRY(stack_check());
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName:
      if (const_mode_) return not_constant();
      return lookup(e.name, scope);
    case ExprKind::kGetattr: return eval_getattr(e, scope);
    case ExprKind::kGetitem:
      if (e.args[1]->kind == ExprKind::kSlice) return eval_slice(e, scope);
      return eval_getitem(e, scope);
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: return eval_filter(e, scope);
    case ExprKind::kTest: return eval_test(e, scope);
    case ExprKind::kNeg:
    case ExprKind::kPos:
    case ExprKind::kNot: return eval_unary(e, scope);
    case ExprKind::kBinary: return eval_binary(e, scope);
    case ExprKind::kAnd:
    case ExprKind::kOr: return eval_logic(e, scope);
    case ExprKind::kConcat: return eval_concat(e, scope);
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCondExpr: return eval_cond(e, scope);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict: return eval_literal(e, scope);
    case ExprKind::kSlice:  // only inside a subscript tuple (x[1:2, 3]); no container takes it
      return Value::undefined("slice objects are not supported as values");
    case ExprKind::kNsRef: break;
  }
  return rt_error(e.pos, "unexpected expression");
}

Result<Value> Interp::eval_getattr(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
  return getattr(obj, e.name, e.pos);
}

Result<Value> Interp::eval_getitem(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
  PG_ASSIGN_OR_RETURN(Value key, eval(*e.args[1], scope));
  return getitem(obj, key, e.pos);
}

// obj[a:b:c]. Jinja2 compiles slices to a plain Python subscript (no sandbox getitem), so every
// failure is an error rather than an Undefined -- except in compile-time constants (eval_const).
Result<Value> Interp::eval_slice(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
  const Expr& idx = *e.args[1];
  Value parts[3] = {Value::none(), Value::none(), Value::none()};
  for (int i = 0; i < 3; ++i)
    if (idx.args[i]) {
      PG_ASSIGN_OR_RETURN(parts[i], eval(*idx.args[i], scope));
    }
  if (obj.is_undefined()) return undefined_error(obj, e.pos);
  const bool is_seq = obj.is_str() || (obj.is_list() && obj.as_list().subscriptable());
  if (!is_seq && const_mode_) return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  if (!is_seq) {
    if (obj.is_dict()) return rt_error(e.pos, "unhashable type: 'slice'");
    return rt_error(e.pos, "'{}' object is not subscriptable", type_name(obj));
  }
  std::vector<size_t> offs;
  int64_t n;
  if (obj.is_str()) {
    if (!obj.as_str().ascii) {
      PG_TRY(charge_bytes(obj.sv().size() * 8));  // one offset per code point
      offs = py::cp_offsets(obj.sv());
    }
    n = obj.as_str().ascii ? static_cast<int64_t>(obj.sv().size()) : static_cast<int64_t>(offs.size() - 1);
  } else {
    n = static_cast<int64_t>(obj.as_list().items.size());
  }
  std::vector<int64_t> picks;
  bool type_error = false;
  int64_t bounds[3];
  PG_TRY(slice_indices(parts[0], parts[1], parts[2], n, picks, e.pos, type_error, bounds));
  if (type_error && const_mode_) return Value::undefined("slice indices must be integers or None");
  if (type_error) return rt_error(e.pos, "slice indices must be integers or None or have an __index__ method");
  PG_TRY(step(picks.size() / 8 + 1));
  if (obj.is_str()) {
    const Str& src = obj.as_str();
    StrBuilder b;
    auto at = [&](int64_t i) { return src.ascii ? static_cast<size_t>(i) : offs[static_cast<size_t>(i)]; };
    const bool contiguous = parts[2].is_none() || (parts[2].is_integral() && parts[2].as_int() == 1);
    if (contiguous && !picks.empty()) {
      b.append(src, at(picks.front()), at(picks.back() + 1));
    } else {
      for (int64_t i : picks) b.append(src, at(i), at(i + 1));
    }
    return make_str(b, e.pos);
  }
  std::vector<Value> items;
  items.reserve(picks.size());
  for (int64_t i : picks) items.push_back(obj.as_list().items[static_cast<size_t>(i)]);
  const ListObj& src = obj.as_list();
  const ListKind kind = src.kind == ListKind::kList ? ListKind::kList : src.kind;
  PG_ASSIGN_OR_RETURN(Value sliced, make_list(std::move(items), kind, e.pos));
  if (kind == ListKind::kRange) {                      // range(...)[a:b:c] is a range again
    auto& r = const_cast<ListObj&>(sliced.as_list());  // freshly made, not yet shared
    r.range_start = src.range_start + bounds[0] * src.range_step;
    r.range_stop = src.range_start + bounds[1] * src.range_step;
    r.range_step = src.range_step * bounds[2];
  }
  return sliced;
}

Result<Value> Interp::eval_test(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0], scope));
  CallArgs args;
  PG_TRY(eval_args(e, scope, args));
  if (e.fn < 0)  // unknown tests pass NameChecker only inside if / inline-if; they fail when run
    return unsupported("template error at {}:{}: no test named '{}' (unknown or not supported)", e.pos.line, e.pos.col,
                       e.name);
  PG_ASSIGN_OR_RETURN(bool r, apply_test(e.fn, subject, args, e.pos));
  return Value::boolean(r);
}

Result<Value> Interp::eval_unary(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
  if (e.kind == ExprKind::kNot) return Value::boolean(!truthy(a));
  return unary_minus(a, e.pos, e.kind == ExprKind::kNeg);
}

Result<Value> Interp::eval_binary(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
  PG_ASSIGN_OR_RETURN(Value b, eval(*e.args[1], scope));
  return binary_op(*this, e.bin, a, b, e.pos);
}

Result<Value> Interp::eval_logic(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
  if (truthy(a) == (e.kind == ExprKind::kOr)) return a;  // Python returns the deciding operand
  return eval(*e.args[1], scope);
}

Result<Value> Interp::eval_concat(const Expr& e, const ScopeP& scope) {
  StrBuilder b;
  for (const auto& a : e.args) {
    PG_ASSIGN_OR_RETURN(Value v, eval(*a, scope));
    append_str(b, v);
    if (b.size() > options_.limits.max_output_bytes) return make_str(b, e.pos);  // reports the limit
  }
  return make_str(b, e.pos);
}

Result<Value> Interp::eval_compare(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
  for (size_t i = 0; i < e.cmp.size(); ++i) {  // a < b < c: pairwise, short-circuiting
    PG_ASSIGN_OR_RETURN(Value b, eval(*e.args[i + 1], scope));
    PG_ASSIGN_OR_RETURN(bool r, compare(*this, e.cmp[i], a, b, e.pos));
    if (!r) return Value::boolean(false);
    a = std::move(b);
  }
  return Value::boolean(true);
}

Result<Value> Interp::eval_cond(const Expr& e, const ScopeP& scope) {
  PG_ASSIGN_OR_RETURN(Value test, eval(*e.args[0], scope));
  if (truthy(test)) return eval(*e.args[1], scope);
  if (e.args[2]) return eval(*e.args[2], scope);
  return Value::undefined(fmt::format(
      "the inline if-expression on line {} evaluated to false and no else section was defined.", e.pos.line));
}

Result<Value> Interp::eval_literal(const Expr& e, const ScopeP& scope) {
  if (e.kind == ExprKind::kDict) {
    std::vector<std::pair<Value, Value>> items;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      PG_ASSIGN_OR_RETURN(Value k, eval(*e.args[i], scope));
      PG_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1], scope));
      items.emplace_back(std::move(k), std::move(v));
    }
    return make_dict(std::move(items), e.pos);
  }
  std::vector<Value> items;
  items.reserve(e.args.size());
  for (const auto& a : e.args) {
    PG_ASSIGN_OR_RETURN(Value v, eval(*a, scope));
    items.push_back(std::move(v));
  }
  return make_list(std::move(items), e.kind == ExprKind::kList ? ListKind::kList : ListKind::kTuple, e.pos);
}

Result<Value> Interp::eval_call(const Expr& e, const ScopeP& scope) {
  if (const_mode_) return not_constant();
  const Expr& callee = *e.args[0];
  Value fn;
  if (callee.kind == ExprKind::kGetattr) {
    PG_ASSIGN_OR_RETURN(Value obj, eval(*callee.args[0], scope));
    if (find_method(obj, callee.name) == MethodLookup::kSafe) {  // obj.method(...) without a bound-method value
      CallArgs args;
      PG_TRY(eval_args(e, scope, args));
      return call_method(*this, obj, callee.name, args, e.pos);
    }
    PG_ASSIGN_OR_RETURN(fn, getattr(obj, callee.name, callee.pos));
  } else {
    PG_ASSIGN_OR_RETURN(fn, eval(callee, scope));
  }
  CallArgs args;
  PG_TRY(eval_args(e, scope, args));
  return call(fn, args, e.pos);
}

Result<Value> Interp::eval_filter(const Expr& e, const ScopeP& scope) {
  if (const_mode_ && (!e.args[0] || e.fn < 0 || e.name == "map" || e.name == "select" || e.name == "reject" ||
                      e.name == "selectattr" || e.name == "rejectattr"))
    return not_constant();  // filters that take the render context are never constant
  Value input;
  if (e.args[0]) {
    PG_ASSIGN_OR_RETURN(input, eval(*e.args[0], scope));
  } else if (block_input_ != nullptr) {
    input = *block_input_;
  }
  CallArgs args;
  PG_TRY(eval_args(e, scope, args));
  if (e.fn < 0)
    return unsupported("template error at {}:{}: no filter named '{}' (unknown or not supported)", e.pos.line,
                       e.pos.col, e.name);
  return apply_filter(e.fn, input, args, e.pos);
}

Result<Value> Interp::call(const Value& fn, const CallArgs& args, Pos pos) {
  PG_TRY(step());
  if (fn.is_undefined()) return undefined_error(fn, pos);
  if (fn.kind() != Kind::kFunc) return rt_error(pos, "'{}' object is not callable", type_name(fn));
  const FuncObj& f = fn.as_func();
  switch (f.kind) {
    case FuncKind::kBuiltin: return call_global(*this, f.name, args, pos);
    case FuncKind::kMethod: return call_method(*this, f.self, f.name, args, pos);
    case FuncKind::kMacro: return call_macro(f, args, pos);
    case FuncKind::kLoopCycle:
    case FuncKind::kLoopChanged: return call_loop_fn(f, args, pos);
  }
  return rt_error(pos, "object is not callable");
}

// jinja2.runtime.Macro.__call__ + the compiled macro prologue: positional args, keyword args for
// the remaining parameters, defaults evaluated in the macro's frame, varargs/kwargs/caller.
Result<Value> Interp::call_macro(const FuncObj& f, const CallArgs& args, Pos pos) {
  const Stmt& m = *f.macro;
  ScopeP closure = f.closure.lock();
  if (!closure) return rt_error(pos, "macro '{}' called after the scope that defined it ended", f.name);
  if (call_depth_ >= options_.limits.max_recursion_depth)
    return resource_exhausted("template error at {}:{}: macro calls nested deeper than max_recursion_depth ({})",
                              pos.line, pos.col, options_.limits.max_recursion_depth);
  const size_t n = m.params.size();
  if (args.pos.size() > n && !m.catch_varargs)
    return rt_error(pos, "macro '{}' takes not more than {} argument(s)", f.name, n);
  auto sc = std::make_shared<Scope>();
  sc->parent = closure;
  std::vector<const Value*> bound(n, nullptr);
  for (size_t i = 0; i < std::min(n, args.pos.size()); ++i) bound[i] = &args.pos[i];
  std::vector<bool> kw_used(args.kw.size(), false);
  for (size_t i = args.pos.size(); i < n; ++i)
    for (size_t k = 0; k < args.kw.size(); ++k)
      if (!kw_used[k] && args.kw[k].first == m.params[i]) {
        bound[i] = &args.kw[k].second;
        kw_used[k] = true;
        break;
      }
  Value caller = Value::undefined("No caller defined");
  std::vector<std::pair<Value, Value>> extra_kw;
  for (size_t k = 0; k < args.kw.size(); ++k) {
    if (kw_used[k]) continue;
    if (args.kw[k].first == "caller" && m.uses_caller) {
      caller = args.kw[k].second;
    } else if (m.catch_kwargs) {
      extra_kw.emplace_back(Value::str(args.kw[k].first, false), args.kw[k].second);
    } else if (args.kw[k].first == "caller") {
      return rt_error(pos, "macro '{}' was invoked with two values for the special caller argument", f.name);
    } else {
      return rt_error(pos, "macro '{}' takes no keyword argument '{}'", f.name, args.kw[k].first);
    }
  }
  ++call_depth_;
  struct DepthRestore {
    int& d;
    ~DepthRestore() { --d; }
  } restore{call_depth_};
  const size_t first_default = n - m.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i] != nullptr) {
      sc->set(m.params[i], *bound[i]);
    } else if (i >= first_default) {
      PG_ASSIGN_OR_RETURN(Value d, eval(*m.defaults[i - first_default], sc));
      sc->set(m.params[i], std::move(d));
    } else {
      sc->set(m.params[i], Value::undefined(fmt::format("parameter '{}' was not provided", m.params[i])));
    }
  }
  if (m.catch_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.pos.size(); ++i) rest.push_back(args.pos[i]);
    PG_ASSIGN_OR_RETURN(Value t, make_list(std::move(rest), ListKind::kTuple, pos));
    sc->set("varargs", std::move(t));
  }
  if (m.catch_kwargs) {
    PG_ASSIGN_OR_RETURN(Value d, make_dict(std::move(extra_kw), pos));
    sc->set("kwargs", std::move(d));
  }
  if (m.uses_caller) sc->set("caller", caller);
  StrBuilder b;
  PG_TRY(exec_body(m.body, sc, b));
  flow_ = Flow::kNormal;
  return make_str(b, pos);
}

Result<Value> Interp::call_loop_fn(const FuncObj& f, const CallArgs& args, Pos pos) {
  LoopObj& loop = f.self.as_loop();
  if (!args.kw.empty()) return rt_error(pos, "loop.{}() takes no keyword arguments", f.name);
  if (f.kind == FuncKind::kLoopCycle) {
    if (args.pos.empty()) return rt_error(pos, "no items for cycling given");
    return args.pos[loop.index0 % args.pos.size()];
  }
  bool same = loop.changed_seen && loop.changed_last.size() == args.pos.size();
  for (size_t i = 0; same && i < args.pos.size(); ++i) same = py_eq(loop.changed_last[i], args.pos[i]);
  if (same) return Value::boolean(false);
  loop.changed_seen = true;
  loop.changed_last = args.pos;
  return Value::boolean(true);
}

}  // namespace pg::jinja
