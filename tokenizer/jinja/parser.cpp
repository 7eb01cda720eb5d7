// Template parser (see parser.h): statements, the compile-time name checks and the entry point.
// Function names and structure follow jinja2/parser.py; expressions live in parse_expr.cpp.
#include "tokenizer/jinja/parser.h"

#include "tokenizer/jinja/parser_impl.h"

namespace pg::jinja {
namespace parse {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokType::kData: return "template data";
    case TokType::kVarBegin: return "begin of print statement";
    case TokType::kVarEnd: return "end of print statement";
    case TokType::kBlockBegin: return "begin of statement block";
    case TokType::kBlockEnd: return "end of statement block";
    case TokType::kName: return fmt::format("'{}'", t.text);
    case TokType::kString: return "string";
    case TokType::kInt: return "integer";
    case TokType::kFloat: return "float";
    case TokType::kOp: return fmt::format("'{}'", t.text);
    case TokType::kEof: return "end of template";
  }
  return "token";
}

namespace {

// Names loaded anywhere below a macro body that make it take *varargs / **kwargs / caller.
void scan_special_names(const Expr* e, Stmt& m) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) {
    if (e->name == "varargs") m.catch_varargs = true;
    if (e->name == "kwargs") m.catch_kwargs = true;
    if (e->name == "caller") m.uses_caller = true;
  }
  for (const auto& a : e->args) scan_special_names(a.get(), m);
  for (const auto& kv : e->kwargs) scan_special_names(kv.second.get(), m);
}

void scan_special_names(const std::vector<StmtPtr>& body, Stmt& m) {
  for (const auto& s : body) {
    for (const auto& e : s->exprs) scan_special_names(e.get(), m);
    for (const auto& d : s->defaults) scan_special_names(d.get(), m);
    scan_special_names(s->body, m);
    scan_special_names(s->else_body, m);
  }
}

}  // namespace

Status Parser::subparse(const Names* end_tokens, std::vector<StmtPtr>& body) {
  DepthGuard guard(this);
  PG_TRY(nest_check());
  while (cur().type != TokType::kEof) {
    const Token& tok = cur();
    if (tok.type == TokType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->pos = tok.pos;
      s->text = Value::str(tok.text, true);
      body.push_back(std::move(s));
      next();
    } else if (tok.type == TokType::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->pos = tok.pos;
      next();
      PG_ASSIGN_OR_RETURN(auto e, parse_tuple(false, true, nullptr, false));
      s->exprs.push_back(std::move(e));
      PG_TRY(expect_type(TokType::kVarEnd, "end of print statement"));
      body.push_back(std::move(s));
    } else if (tok.type == TokType::kBlockBegin) {
      next();
      if (end_tokens != nullptr && is_any_name(*end_tokens)) return ok_status();
      PG_ASSIGN_OR_RETURN(auto s, parse_statement());
      body.push_back(std::move(s));
      PG_TRY(expect_type(TokType::kBlockEnd, "end of statement block"));
    } else {
      return unexpected();
    }
  }
  if (end_tokens != nullptr) {
    std::string want;
    for (std::string_view n : *end_tokens) want += fmt::format("{}'{}'", want.empty() ? "" : " or ", n);
    return fail(cur(), fmt::format("unexpected end of template, expected {}", want));
  }
  return ok_status();
}

Status Parser::parse_statements(Names end_tokens, std::vector<StmtPtr>& body, bool drop_needle) {
  skip_op(":");
  PG_TRY(expect_type(TokType::kBlockEnd, "end of statement block"));
  PG_TRY(subparse(&end_tokens, body));
  if (drop_needle) next();
  return ok_status();
}

Result<StmtPtr> Parser::parse_statement() {
  const Token tok = cur();
  if (tok.type != TokType::kName) return fail(tok, "tag name expected");
  const std::string& n = tok.text;
  if (n == "for") return parse_for(tok.pos);
  if (n == "if") return parse_if(tok.pos);
  if (n == "set") return parse_set(tok.pos);
  if (n == "macro") return parse_macro(tok.pos, false);
  if (n == "call") return parse_macro(tok.pos, true);
  if (n == "with") return parse_with(tok.pos);
  auto s = std::make_unique<Stmt>();
  s->pos = tok.pos;
  if (n == "break" || n == "continue") {
    if (loop_depth_ == 0) return fail(tok, fmt::format("'{}' outside loop", n));
    s->kind = n == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    next();
    return s;
  }
  if (n == "print") {
    s->kind = StmtKind::kPrint;
    next();
    while (cur().type != TokType::kBlockEnd) {
      if (!s->exprs.empty()) PG_TRY(expect_op(","));
      PG_ASSIGN_OR_RETURN(auto e, parse_expression());
      s->exprs.push_back(std::move(e));
    }
    return s;
  }
  if (n == "filter") {
    s->kind = StmtKind::kFilterBlock;
    next();
    PG_ASSIGN_OR_RETURN(auto f, parse_filter(nullptr, true));
    s->exprs.push_back(std::move(f));
    PG_TRY(parse_statements({"endfilter"}, s->body, true));
    return s;
  }
  if (n == "generation") {
    s->kind = StmtKind::kScope;
    next();
    PG_TRY(parse_statements({"endgeneration"}, s->body, true));
    return s;
  }
  static constexpr std::string_view kUnsupportedTags[] = {"extends",    "block", "include", "import",   "from",
                                                          "autoescape", "do",    "trans",   "pluralize"};
  for (std::string_view u : kUnsupportedTags)
    if (n == u)
      return unsupported("template error at {}:{}: the '{{% {} %}}' tag is not supported", tok.pos.line, tok.pos.col,
                         n);
  return fail(tok, fmt::format("encountered unknown tag '{}'", n));
}

Result<StmtPtr> Parser::parse_for(Pos pos) {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFor;
  s->pos = pos;
  static const Names kIn = {"in"};
  PG_ASSIGN_OR_RETURN(s->target, parse_assign_target(true, false, &kIn, false));
  if (!skip_name("in")) return fail(cur(), fmt::format("expected 'in', got {}", describe(cur())));
  static const Names kRecursive = {"recursive"};
  PG_ASSIGN_OR_RETURN(auto iter, parse_tuple(false, false, &kRecursive, false));
  s->exprs.push_back(std::move(iter));
  if (skip_name("if")) {
    PG_ASSIGN_OR_RETURN(auto cond, parse_expression());
    s->exprs.push_back(std::move(cond));
  }
  if (is_name("recursive"))
    return unsupported("template error at {}:{}: recursive for loops are not supported", cur().pos.line, cur().pos.col);
  ++loop_depth_;
  Status st = parse_statements({"endfor", "else"}, s->body, false);
  --loop_depth_;
  PG_TRY(st);
  const bool has_else = is_name("else");
  next();
  if (has_else) PG_TRY(parse_statements({"endfor"}, s->else_body, true));
  return s;
}

Result<StmtPtr> Parser::parse_if(Pos pos) {
  next();
  auto root = std::make_unique<Stmt>();
  root->kind = StmtKind::kIf;
  root->pos = pos;
  Stmt* node_ = root.get();
  int n_elif = 0;
  while (true) {
    PG_ASSIGN_OR_RETURN(auto test, parse_tuple(false, false, nullptr, false));
    node_->exprs.push_back(std::move(test));
    PG_TRY(parse_statements({"elif", "else", "endif"}, node_->body, false));
    const Token tok = cur();
    next();
    if (tok.text == "elif") {
      auto elif = std::make_unique<Stmt>();
      elif->kind = StmtKind::kIf;
      elif->name = "elif";  // the interpreter walks elif chains iteratively
      elif->pos = tok.pos;
      if (++n_elif > kMaxElifs)
        return unsupported("template error at {}:{}: more than {} elif branches", tok.pos.line, tok.pos.col, kMaxElifs);
      Stmt* raw = elif.get();
      node_->else_body.push_back(std::move(elif));
      node_ = raw;
      continue;
    }
    if (tok.text == "else") PG_TRY(parse_statements({"endif"}, node_->else_body, true));
    return root;
  }
}

Result<StmtPtr> Parser::parse_set(Pos pos) {
  next();
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  PG_ASSIGN_OR_RETURN(s->target, parse_assign_target(true, false, nullptr, true));
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    PG_ASSIGN_OR_RETURN(auto e, parse_tuple(false, true, nullptr, false));
    s->exprs.push_back(std::move(e));
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (is_op("|")) {
    PG_ASSIGN_OR_RETURN(auto f, parse_filter(nullptr, false));
    s->exprs.push_back(std::move(f));
  }
  PG_TRY(parse_statements({"endset"}, s->body, true));
  return s;
}

Status Parser::parse_signature(Stmt& s) {
  PG_TRY(expect_op("("));
  while (!is_op(")")) {
    if (!s.params.empty()) PG_TRY(expect_op(","));
    PG_ASSIGN_OR_RETURN(std::string p, expect_name());
    if (skip_op("=")) {
      PG_ASSIGN_OR_RETURN(auto d, parse_expression());
      s.defaults.push_back(std::move(d));
    } else if (!s.defaults.empty()) {
      return fail(cur(), "non-default argument follows default argument");
    }
    s.params.push_back(std::move(p));
  }
  return expect_op(")");
}

Result<StmtPtr> Parser::parse_macro(Pos pos, bool is_call_block) {
  next();
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  if (is_call_block) {
    s->kind = StmtKind::kCallBlock;
    s->name = "caller";
    if (is_op("(")) PG_TRY(parse_signature(*s));
    PG_ASSIGN_OR_RETURN(auto call, parse_expression());
    if (call->kind != ExprKind::kCall) return fail(cur(), "expected call");
    s->exprs.push_back(std::move(call));
  } else {
    s->kind = StmtKind::kMacro;
    PG_ASSIGN_OR_RETURN(s->name, expect_name());
    PG_TRY(parse_signature(*s));
  }
  const int saved = loop_depth_;
  loop_depth_ = 0;
  Status st = parse_statements({is_call_block ? "endcall" : "endmacro"}, s->body, true);
  loop_depth_ = saved;
  PG_TRY(st);
  scan_special_names(s->body, *s);
  return s;
}

Result<StmtPtr> Parser::parse_with(Pos pos) {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kWith;
  s->pos = pos;
  while (cur().type != TokType::kBlockEnd) {
    if (!s->targets.empty()) PG_TRY(expect_op(","));
    PG_ASSIGN_OR_RETURN(auto t, parse_assign_target(true, false, nullptr, false));
    PG_TRY(expect_op("="));
    PG_ASSIGN_OR_RETURN(auto v, parse_expression());
    s->targets.push_back(std::move(t));
    s->exprs.push_back(std::move(v));
  }
  PG_TRY(parse_statements({"endwith"}, s->body, true));
  return s;
}

static bool can_assign(const Expr& e) {
  if (e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef) return true;
  if (e.kind != ExprKind::kTuple) return false;
  for (const auto& a : e.args)
    if (!can_assign(*a)) return false;
  return true;
}

Result<ExprPtr> Parser::parse_assign_target(bool with_tuple, bool name_only, const Names* extra_end,
                                            bool with_namespace) {
  const Token tok = cur();
  ExprPtr target;
  if (with_namespace && look().type == TokType::kOp && look().text == ".") {
    PG_ASSIGN_OR_RETURN(std::string ns, expect_name());
    next();  // '.'
    PG_ASSIGN_OR_RETURN(std::string attr, expect_name());
    target = node(ExprKind::kNsRef, tok.pos);
    target->name = std::move(ns);
    target->attr = std::move(attr);
  } else if (name_only) {
    PG_ASSIGN_OR_RETURN(std::string n, expect_name());
    target = node(ExprKind::kName, tok.pos);
    target->name = std::move(n);
  } else if (with_tuple) {
    PG_ASSIGN_OR_RETURN(target, parse_tuple(true, true, extra_end, false));
  } else {
    PG_ASSIGN_OR_RETURN(target, parse_primary());
  }
  if (!can_assign(*target)) return fail(tok, "can't assign to this expression");
  return target;
}

class NameChecker {
 public:
  Status body(const std::vector<StmtPtr>& stmts, bool soft) {
    for (const auto& s : stmts) PG_TRY(stmt(*s, soft));
    return ok_status();
  }

 private:
  Status stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kIf:
        PG_TRY(expr(s.exprs[0].get(), true));
        PG_TRY(body(s.body, true));
        return body(s.else_body, true);
      case StmtKind::kFor:
        PG_TRY(expr(s.exprs[0].get(), soft));
        if (s.exprs.size() > 1) PG_TRY(expr(s.exprs[1].get(), false));
        PG_TRY(body(s.body, false));
        return body(s.else_body, false);
      case StmtKind::kCallBlock:
        PG_TRY(expr(s.exprs[0].get(), soft));
        for (const auto& d : s.defaults) PG_TRY(expr(d.get(), false));
        return body(s.body, false);
      case StmtKind::kWith:
        for (const auto& e : s.exprs) PG_TRY(expr(e.get(), soft));
        return body(s.body, false);
      case StmtKind::kPrint:
      case StmtKind::kSet:
        for (const auto& e : s.exprs) PG_TRY(expr(e.get(), soft));
        return ok_status();
      default:  // macro, set/filter blocks, generation: inner frames
        for (const auto& e : s.exprs) PG_TRY(expr(e.get(), false));
        for (const auto& d : s.defaults) PG_TRY(expr(d.get(), false));
        return body(s.body, false);
    }
  }

  Status expr(const Expr* e, bool soft) {
    if (e == nullptr) return ok_status();
    if (e->kind == ExprKind::kCondExpr) soft = true;
    if ((e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest) && e->fn < 0 && !soft)
      return unsupported("template error at {}:{}: no {} named '{}' (unknown or not supported)", e->pos.line,
                         e->pos.col, e->kind == ExprKind::kFilter ? "filter" : "test", e->name);
    for (const auto& a : e->args) PG_TRY(expr(a.get(), soft));
    for (const auto& kv : e->kwargs) PG_TRY(expr(kv.second.get(), soft));
    return ok_status();
  }
};

}  // namespace parse

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  PG_ASSIGN_OR_RETURN(auto tokens, lex(source));
  parse::Parser parser(std::move(tokens));
  auto program = std::make_shared<Program>();
  PG_TRY(parser.parse_all(program->body));
  // Jinja2 folds constants before generating code, so a folded-away subtree is never checked.
  fold_constants(*program);
  PG_TRY(parse::NameChecker().body(program->body, false));
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace pg::jinja
