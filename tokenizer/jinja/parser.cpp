// Template parser (see parser.h). Function names and structure follow jinja2/parser.py so the
// precedence quirks carry over (filters bind tighter than unary minus's operand, `is` tests take
// one bare argument, comparisons chain).
#include "tokenizer/jinja/parser.h"

#include "tokenizer/jinja/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

namespace pg::jinja {
namespace {

// Nesting of parentheses/blocks. CPython's recursion limit stops Jinja2 well before this.
constexpr int kMaxNesting = 100;
// Height of an expression tree (long operator chains build deep left-leaning trees).
constexpr int kMaxExprDepth = 256;
// elif branches of one if (each nests one level deeper in the tree that owns them).
constexpr int kMaxElifs = 4096;

using Names = std::initializer_list<std::string_view>;

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

ExprPtr node(ExprKind kind, Pos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Status parse_all(std::vector<StmtPtr>& body) {
    stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    PG_TRY(subparse(nullptr, body));
    return ok_status();
  }

 private:
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) { ++p->nesting_; }
    ~DepthGuard() { --p->nesting_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokType::kName && cur().text == n; }
  bool is_any_name(Names names) const {
    if (cur().type != TokType::kName) return false;
    return std::find(names.begin(), names.end(), std::string_view(cur().text)) != names.end();
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  Status fail(const Token& t, std::string_view msg) const { return syntax_error_at(t.pos, msg); }
  Status unexpected() const {
    if (cur().type == TokType::kEof) return fail(cur(), "unexpected end of template");
    return fail(cur(), fmt::format("unexpected {}", describe(cur())));
  }
  Status expect_op(std::string_view op) {
    if (!is_op(op)) return fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    next();
    return ok_status();
  }
  Status expect_type(TokType type, std::string_view what) {
    if (cur().type != type) return fail(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
    next();
    return ok_status();
  }
  Result<std::string> expect_name() {
    if (cur().type != TokType::kName) return fail(cur(), fmt::format("expected name, got {}", describe(cur())));
    std::string n = cur().text;
    next();
    return n;
  }
  Status nest_check() const {
    const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (stack_base_ > here && stack_base_ - here > kStackBudgetBytes)
      return unsupported("template error at {}:{}: nesting exceeds the parser's stack budget", cur().pos.line, cur().pos.col);
    if (nesting_ > kMaxNesting) return unsupported("template error at {}:{}: nesting deeper than {} levels", cur().pos.line, cur().pos.col, kMaxNesting);
    return ok_status();
  }
  // Records the subtree height and refuses trees taller than kMaxExprDepth.
  Status seal(Expr& e) const {
    int d = 0;
    for (const auto& a : e.args)
      if (a) d = std::max(d, a->depth);
    for (const auto& kv : e.kwargs) d = std::max(d, kv.second->depth);
    e.depth = d + 1;
    if (e.depth > kMaxExprDepth)
      return unsupported("template error at {}:{}: expression nested deeper than {} levels", e.pos.line, e.pos.col, kMaxExprDepth);
    return ok_status();
  }
  Result<ExprPtr> binary(ExprKind kind, Pos pos, ExprPtr a, ExprPtr b) {
    auto e = node(kind, pos);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    PG_TRY(seal(*e));
    return e;
  }

  // --- statements ---
  Status subparse(const Names* end_tokens, std::vector<StmtPtr>& body);
  Status parse_statements(Names end_tokens, std::vector<StmtPtr>& body, bool drop_needle);
  Result<StmtPtr> parse_statement();
  Result<StmtPtr> parse_for(Pos pos);
  Result<StmtPtr> parse_if(Pos pos);
  Result<StmtPtr> parse_set(Pos pos);
  Result<StmtPtr> parse_macro(Pos pos, bool is_call_block);
  Status parse_signature(Stmt& s);
  Result<StmtPtr> parse_with(Pos pos);
  Result<ExprPtr> parse_assign_target(bool with_tuple, bool name_only, const Names* extra_end, bool with_namespace);

  // --- expressions ---
  Result<ExprPtr> parse_expression(bool with_condexpr = true);
  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter = true);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, const Names* extra_end, bool explicit_parens);
  bool is_tuple_end(const Names* extra_end) const;
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr e);
  Result<ExprPtr> parse_filter_expr(ExprPtr e);
  Result<ExprPtr> parse_subscript(ExprPtr e);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(Expr& call);
  Result<ExprPtr> parse_filter(ExprPtr e, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr e);

  std::vector<Token> t_;
  size_t i_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  uintptr_t stack_base_ = 0;  // for break/continue: 0 outside loops and inside macro bodies
};

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
  static constexpr std::string_view kUnsupportedTags[] = {"extends", "block", "include", "import", "from",
                                                         "autoescape", "do", "trans", "pluralize"};
  for (std::string_view u : kUnsupportedTags)
    if (n == u)
      return unsupported("template error at {}:{}: the '{{% {} %}}' tag is not supported", tok.pos.line, tok.pos.col, n);
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

bool can_assign(const Expr& e) {
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

// --- expressions ---

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

Result<ExprPtr> Parser::parse_condexpr() {
  DepthGuard guard(this);
  PG_TRY(nest_check());
  const Pos pos = cur().pos;
  PG_ASSIGN_OR_RETURN(auto e1, parse_or());
  while (skip_name("if")) {
    PG_ASSIGN_OR_RETURN(auto e2, parse_or());
    ExprPtr e3;
    if (skip_name("else")) {
      PG_ASSIGN_OR_RETURN(e3, parse_condexpr());
    }
    auto c = node(ExprKind::kCondExpr, pos);
    c->args.push_back(std::move(e2));
    c->args.push_back(std::move(e1));
    c->args.push_back(std::move(e3));
    PG_TRY(seal(*c));
    e1 = std::move(c);
  }
  return e1;
}

Result<ExprPtr> Parser::parse_or() {
  PG_ASSIGN_OR_RETURN(auto left, parse_and());
  while (is_name("or")) {
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto right, parse_and());
    PG_ASSIGN_OR_RETURN(left, binary(ExprKind::kOr, pos, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  PG_ASSIGN_OR_RETURN(auto left, parse_not());
  while (is_name("and")) {
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto right, parse_not());
    PG_ASSIGN_OR_RETURN(left, binary(ExprKind::kAnd, pos, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(this);
    PG_TRY(nest_check());
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto inner, parse_not());
    auto e = node(ExprKind::kNot, pos);
    e->args.push_back(std::move(inner));
    PG_TRY(seal(*e));
    return e;
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  const Pos pos = cur().pos;
  PG_ASSIGN_OR_RETURN(auto first, parse_math1());
  ExprPtr cmp;
  while (true) {
    CmpOp op;
    if (cur().type == TokType::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                       cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      const std::string& t = cur().text;
      op = t == "==" ? CmpOp::kEq : t == "!=" ? CmpOp::kNe : t == "<" ? CmpOp::kLt : t == "<=" ? CmpOp::kLe
                                                       : t == ">" ? CmpOp::kGt : CmpOp::kGe;
      next();
    } else if (is_name("in")) {
      op = CmpOp::kIn;
      next();
    } else if (is_name("not") && look().type == TokType::kName && look().text == "in") {
      op = CmpOp::kNotIn;
      next();
      next();
    } else {
      break;
    }
    PG_ASSIGN_OR_RETURN(auto operand, parse_math1());
    if (!cmp) {
      cmp = node(ExprKind::kCompare, pos);
      cmp->args.push_back(std::move(first));
    }
    cmp->cmp.push_back(op);
    cmp->args.push_back(std::move(operand));
  }
  if (!cmp) return first;
  PG_TRY(seal(*cmp));
  return cmp;
}

Result<ExprPtr> Parser::parse_math1() {
  PG_ASSIGN_OR_RETURN(auto left, parse_concat());
  while (is_op("+") || is_op("-")) {
    const BinOp op = is_op("+") ? BinOp::kAdd : BinOp::kSub;
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto right, parse_concat());
    PG_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, pos, std::move(left), std::move(right)));
    left->bin = op;
  }
  return left;
}

Result<ExprPtr> Parser::parse_concat() {
  const Pos pos = cur().pos;
  PG_ASSIGN_OR_RETURN(auto first, parse_math2());
  if (!is_op("~")) return first;
  auto c = node(ExprKind::kConcat, pos);
  c->args.push_back(std::move(first));
  while (skip_op("~")) {
    PG_ASSIGN_OR_RETURN(auto e, parse_math2());
    c->args.push_back(std::move(e));
  }
  PG_TRY(seal(*c));
  return c;
}

Result<ExprPtr> Parser::parse_math2() {
  PG_ASSIGN_OR_RETURN(auto left, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string& t = cur().text;
    const BinOp op = t == "*" ? BinOp::kMul : t == "/" ? BinOp::kDiv : t == "//" ? BinOp::kFloorDiv : BinOp::kMod;
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto right, parse_pow());
    PG_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, pos, std::move(left), std::move(right)));
    left->bin = op;
  }
  return left;
}

Result<ExprPtr> Parser::parse_pow() {
  PG_ASSIGN_OR_RETURN(auto left, parse_unary());
  while (is_op("**")) {
    const Pos pos = cur().pos;
    next();
    PG_ASSIGN_OR_RETURN(auto right, parse_unary());
    PG_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, pos, std::move(left), std::move(right)));
    left->bin = BinOp::kPow;
  }
  return left;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(this);
  PG_TRY(nest_check());
  const Pos pos = cur().pos;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const ExprKind kind = is_op("-") ? ExprKind::kNeg : ExprKind::kPos;
    next();
    PG_ASSIGN_OR_RETURN(auto inner, parse_unary(false));
    e = node(kind, pos);
    e->args.push_back(std::move(inner));
    PG_TRY(seal(*e));
  } else {
    PG_ASSIGN_OR_RETURN(e, parse_primary());
  }
  PG_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
  if (with_filter) {
      PG_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
  return e;
}

Result<ExprPtr> Parser::parse_primary() {
  DepthGuard guard(this);
  PG_TRY(nest_check());
  const Token& tok = cur();
  auto e = node(ExprKind::kConst, tok.pos);
  switch (tok.type) {
    case TokType::kName:
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::boolean(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::boolean(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = tok.text;
      }
      next();
      return e;
    case TokType::kString: {
      std::string s = tok.text;
      next();
      while (cur().type == TokType::kString) {  // adjacent literals concatenate
        s += cur().text;
        next();
      }
      e->value = Value::str(std::move(s), true);
      return e;
    }
    case TokType::kInt:
      e->value = Value::integer(tok.ival);
      next();
      return e;
    case TokType::kFloat:
      e->value = Value::floating(tok.fval);
      next();
      return e;
    case TokType::kOp:
      if (tok.text == "(") {
        next();
        PG_ASSIGN_OR_RETURN(auto inner, parse_tuple(false, true, nullptr, true));
        PG_TRY(expect_op(")"));
        return inner;
      }
      if (tok.text == "[") return parse_list();
      if (tok.text == "{") return parse_dict();
      break;
    default: break;
  }
  return unexpected();
}

bool Parser::is_tuple_end(const Names* extra_end) const {
  if (cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd || is_op(")")) return true;
  return extra_end != nullptr && is_any_name(*extra_end);
}

Result<ExprPtr> Parser::parse_tuple(bool simplified, bool with_condexpr, const Names* extra_end, bool explicit_parens) {
  const Pos pos = cur().pos;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) PG_TRY(expect_op(","));
    if (is_tuple_end(extra_end)) break;
    ExprPtr e;
    if (simplified) {
      PG_ASSIGN_OR_RETURN(e, parse_primary());
    } else {
      PG_ASSIGN_OR_RETURN(e, parse_expression(with_condexpr));
    }
    args.push_back(std::move(e));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) return fail(cur(), fmt::format("expected an expression, got {}", describe(cur())));
  }
  auto t = node(ExprKind::kTuple, pos);
  t->args = std::move(args);
  PG_TRY(seal(*t));
  return t;
}

Result<ExprPtr> Parser::parse_list() {
  auto l = node(ExprKind::kList, cur().pos);
  PG_TRY(expect_op("["));
  while (!is_op("]")) {
    if (!l->args.empty()) PG_TRY(expect_op(","));
    if (is_op("]")) break;
    PG_ASSIGN_OR_RETURN(auto e, parse_expression());
    l->args.push_back(std::move(e));
  }
  PG_TRY(expect_op("]"));
  PG_TRY(seal(*l));
  return l;
}

Result<ExprPtr> Parser::parse_dict() {
  auto d = node(ExprKind::kDict, cur().pos);
  PG_TRY(expect_op("{"));
  while (!is_op("}")) {
    if (!d->args.empty()) PG_TRY(expect_op(","));
    if (is_op("}")) break;
    PG_ASSIGN_OR_RETURN(auto k, parse_expression());
    PG_TRY(expect_op(":"));
    PG_ASSIGN_OR_RETURN(auto v, parse_expression());
    d->args.push_back(std::move(k));
    d->args.push_back(std::move(v));
  }
  PG_TRY(expect_op("}"));
  PG_TRY(seal(*d));
  return d;
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      PG_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
    } else if (is_op("(")) {
      auto c = node(ExprKind::kCall, cur().pos);
      c->args.push_back(std::move(e));
      PG_TRY(parse_call_args(*c));
      PG_TRY(seal(*c));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      PG_ASSIGN_OR_RETURN(e, parse_filter(std::move(e), false));
    } else if (is_name("is")) {
      PG_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
    } else if (is_op("(")) {
      auto c = node(ExprKind::kCall, cur().pos);
      c->args.push_back(std::move(e));
      PG_TRY(parse_call_args(*c));
      PG_TRY(seal(*c));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr e) {
  const Token tok = cur();
  next();
  if (tok.text == ".") {
    const Token attr = cur();
    next();
    if (attr.type == TokType::kName) {
      auto g = node(ExprKind::kGetattr, tok.pos);
      g->name = attr.text;
      g->args.push_back(std::move(e));
      PG_TRY(seal(*g));
      return g;
    }
    if (attr.type != TokType::kInt) return fail(attr, "expected name or number");
    auto idx = node(ExprKind::kConst, attr.pos);
    idx->value = Value::integer(attr.ival);
    auto g = node(ExprKind::kGetitem, tok.pos);
    g->args.push_back(std::move(e));
    g->args.push_back(std::move(idx));
    PG_TRY(seal(*g));
    return g;
  }
  // '[' subscribed (',' subscribed)* ']'
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) PG_TRY(expect_op(","));
    PG_ASSIGN_OR_RETURN(auto a, parse_subscribed());
    args.push_back(std::move(a));
  }
  PG_TRY(expect_op("]"));
  ExprPtr index;  // x[] indexes with an empty tuple, as in Jinja2
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    index = node(ExprKind::kTuple, tok.pos);
    index->args = std::move(args);
    PG_TRY(seal(*index));
  }
  auto g = node(ExprKind::kGetitem, tok.pos);
  g->args.push_back(std::move(e));
  g->args.push_back(std::move(index));
  PG_TRY(seal(*g));
  return g;
}

Result<ExprPtr> Parser::parse_subscribed() {
  const Pos pos = cur().pos;
  std::vector<ExprPtr> args;
  if (skip_op(":")) {
    args.push_back(nullptr);
  } else {
    PG_ASSIGN_OR_RETURN(auto e, parse_expression());
    if (!is_op(":")) return e;
    next();
    args.push_back(std::move(e));
  }
  if (is_op(":")) {
    args.push_back(nullptr);
  } else if (!is_op("]") && !is_op(",")) {
    PG_ASSIGN_OR_RETURN(auto e, parse_expression());
    args.push_back(std::move(e));
  } else {
    args.push_back(nullptr);
  }
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) {
      PG_ASSIGN_OR_RETURN(auto e, parse_expression());
      args.push_back(std::move(e));
    } else {
      args.push_back(nullptr);
    }
  } else {
    args.push_back(nullptr);
  }
  auto s = node(ExprKind::kSlice, pos);
  s->args = std::move(args);
  PG_TRY(seal(*s));
  return s;
}

// '(' [expr {',' expr}] [name '=' expr {',' name '=' expr}] ')' -- positional after keyword
// arguments, *args and **kwargs are refused like in Jinja2 (the latter two as unsupported).
Status Parser::parse_call_args(Expr& call) {
  PG_TRY(expect_op("("));
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      PG_TRY(expect_op(","));
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**"))
      return unsupported("template error at {}:{}: *args / **kwargs in calls are not supported", cur().pos.line, cur().pos.col);
    if (cur().type == TokType::kName && look().type == TokType::kOp && look().text == "=") {
      std::string key = cur().text;
      next();
      next();
      PG_ASSIGN_OR_RETURN(auto v, parse_expression());
      call.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (!call.kwargs.empty()) return fail(cur(), "invalid syntax for function call expression");
      PG_ASSIGN_OR_RETURN(auto v, parse_expression());
      call.args.push_back(std::move(v));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Result<ExprPtr> Parser::parse_filter(ExprPtr e, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token tok = cur();
    PG_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      PG_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    const int fn = find_filter(name);  // unknown (-1): check_names() decides whether that is an error
    auto f = node(ExprKind::kFilter, tok.pos);
    f->name = std::move(name);
    f->fn = fn;
    f->args.push_back(std::move(e));
    if (is_op("(")) PG_TRY(parse_call_args(*f));
    PG_TRY(seal(*f));
    e = std::move(f);
  }
  return e;
}

Result<ExprPtr> Parser::parse_test(ExprPtr e) {
  const Pos pos = cur().pos;
  next();  // 'is'
  const bool negated = skip_name("not");
  const Token tok = cur();
  PG_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (skip_op(".")) {
    PG_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  const int fn = find_test(name);
  auto t = node(ExprKind::kTest, tok.pos);
  t->name = std::move(name);
  t->fn = fn;
  t->args.push_back(std::move(e));
  if (is_op("(")) {
    PG_TRY(parse_call_args(*t));
  } else if ((cur().type == TokType::kName || cur().type == TokType::kString || cur().type == TokType::kInt ||
              cur().type == TokType::kFloat || is_op("[") || is_op("{")) &&
             !is_any_name({"else", "or", "and"})) {
    if (is_name("is")) return fail(cur(), "you cannot chain multiple tests with is");
    PG_ASSIGN_OR_RETURN(auto arg, parse_primary());
    PG_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    t->args.push_back(std::move(arg));
  }
  PG_TRY(seal(*t));
  if (!negated) return t;
  auto n = node(ExprKind::kNot, pos);
  n->args.push_back(std::move(t));
  PG_TRY(seal(*n));
  return n;
}

// Jinja2's code generator rejects an unknown filter or test at compile time, except in a "soft"
// frame (an if statement's tests and bodies, an inline if) where it fails only when it runs.
// Loops, macros, call/filter/set blocks and with open inner, non-soft frames.
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

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  PG_ASSIGN_OR_RETURN(auto tokens, lex(source));
  Parser parser(std::move(tokens));
  auto program = std::make_shared<Program>();
  PG_TRY(parser.parse_all(program->body));
  PG_TRY(NameChecker().body(program->body, false));
  fold_constants(*program);
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace pg::jinja
