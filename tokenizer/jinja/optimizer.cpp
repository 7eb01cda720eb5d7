// Constant folding with jinja2's rules (jinja2/optimizer.py, CodeGenerator.visit_Output): it is
// observable, because compile-time evaluation slices through the sandbox's getitem (a failing
// slice of a literal prints "" instead of raising) and skips untaken inline-if branches.
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

// Folding runs on a small private budget; past it, the rest is simply left to the render.
RenderOptions fold_options() {
  RenderOptions o;
  o.limits.max_output_bytes = size_t{1} << 20;
  o.limits.max_steps = 2'000'000;
  o.limits.max_recursion_depth = 8;
  o.limits.max_memory_bytes = size_t{64} << 20;
  return o;
}

// jinja2.compiler.has_safe_repr: the values the optimizer may turn into constants.
bool has_safe_repr(const Value& v, int depth = 0) {
  if (depth > kMaxValueDepth) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kStr: return true;
    case Kind::kList: {
      const ListObj& l = v.as_list();
      if (l.kind == ListKind::kRange) return true;
      if (l.kind != ListKind::kList && l.kind != ListKind::kTuple) return false;
      for (const Value& x : l.items)
        if (!has_safe_repr(x, depth + 1)) return false;
      return true;
    }
    case Kind::kDict:
      for (const auto& [k, x] : v.as_dict().items)
        if (!has_safe_repr(k, depth + 1) || !has_safe_repr(x, depth + 1)) return false;
      return true;
    default: return false;
  }
}

// A copy owned by the template (no render's memory tracker), for safe-repr values only.
Value detach(const Value& v) {
  switch (v.kind()) {
    case Kind::kStr: {
      StrBuilder b;
      b.append(v.as_str());
      auto s = b.finish(nullptr);
      s->markup = v.as_str().markup;
      return Value(StrP(std::move(s)));
    }
    case Kind::kList: {
      auto l = std::make_shared<ListObj>();
      const ListObj& src = v.as_list();
      for (const Value& x : src.items) l->items.push_back(detach(x));
      l->kind = src.kind;
      l->depth = src.depth;
      l->range_start = src.range_start;
      l->range_stop = src.range_stop;
      l->range_step = src.range_step;
      return Value(ListP(std::move(l)));
    }
    case Kind::kDict: {
      auto d = std::make_shared<DictObj>();
      const DictObj& src = v.as_dict();
      for (const auto& [k, x] : src.items) d->items.emplace_back(detach(k), detach(x));
      d->index = src.index;
      d->depth = src.depth;
      return Value(DictP(std::move(d)));
    }
    default: return v;
  }
}

class Folder {
 public:
  Folder() : options_(fold_options()), interp_(options_) {}

  void body(std::vector<StmtPtr>& stmts) {
    for (auto& s : stmts) stmt(*s);
  }

 private:
  void stmt(Stmt& s) {
    for (auto& e : s.exprs) expr(e);
    for (auto& d : s.defaults) expr(d);
    if (s.kind == StmtKind::kPrint)
      for (auto& e : s.exprs) output(e);
    body(s.body);
    body(s.else_body);
  }

  bool try_const(const Expr& e, Value& out) {
    if (exhausted_) return false;
    auto v = interp_.eval_const(e);
    if (!v.ok()) {
      if (v.status().code() == StatusCode::kResourceExhausted) exhausted_ = true;
      return false;
    }
    out = std::move(v).value();
    return true;
  }

  void replace(ExprPtr& e, Value v) {
    auto c = std::make_unique<Expr>();
    c->kind = ExprKind::kConst;
    c->pos = e->pos;
    c->value = std::move(v);
    e = std::move(c);
  }

  // Optimizer.generic_visit: children first, then this node if it folds to a safe value.
  void expr(ExprPtr& e) {
    if (!e || e->kind == ExprKind::kConst || e->kind == ExprKind::kName || e->kind == ExprKind::kNsRef) return;
    for (auto& a : e->args) expr(a);
    for (auto& kv : e->kwargs) expr(kv.second);
    if (e->kind == ExprKind::kSlice || e->kind == ExprKind::kCall) return;
    if (e->kind == ExprKind::kFilter && !e->args[0]) return;
    Value v;
    if (try_const(*e, v) && has_safe_repr(v)) replace(e, detach(v));
  }

  // visit_Output: a constant {{ }} expression is written as str(value), whatever the value.
  void output(ExprPtr& e) {
    if (e->kind == ExprKind::kConst) return;
    Value v;
    if (!try_const(*e, v)) return;
    replace(e, v.is_str() ? detach(v) : Value::str(to_str(v, interp_.str_limit()), true));
  }

  RenderOptions options_;
  Interp interp_;
  bool exhausted_ = false;
};

}  // namespace

void fold_constants(Program& program) {
  Folder f;
  f.body(program.body);
}

}  // namespace pg::jinja
