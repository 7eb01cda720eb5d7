// The Parser class shared by parser.cpp (statements, checks, entry point) and parse_expr.cpp
// (expressions). Internal to pg_jinja.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja::parse {

// Parser recursion guards entered (about three per parenthesis level, one per block level).
// CPython's recursion limit stops Jinja2 near 80 parenthesis levels.
constexpr int kMaxNesting = 400;
// Height of an expression tree (long operator chains build deep left-leaning trees).
constexpr int kMaxExprDepth = 256;
// elif branches of one if (each nests one level deeper in the tree that owns them).
constexpr int kMaxElifs = 4096;

using Names = std::initializer_list<std::string_view>;

// How a token shows in error messages ("'x'", "end of template"...).
std::string describe(const Token& t);

inline ExprPtr node(ExprKind kind, Pos pos) {
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
    if (stack_base_ > here && stack_base_ - here > kParseStackBytes)
      return unsupported("template error at {}:{}: nesting exceeds the parser's stack budget", cur().pos.line,
                         cur().pos.col);
    if (nesting_ > kMaxNesting)
      return unsupported("template error at {}:{}: nesting deeper than {} levels", cur().pos.line, cur().pos.col,
                         kMaxNesting);
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
      return unsupported("template error at {}:{}: expression nested deeper than {} levels", e.pos.line, e.pos.col,
                         kMaxExprDepth);
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

}  // namespace pg::jinja::parse
