// Expression parsing (jinja2/parser.py parse_expression .. parse_test): precedence from
// conditional expressions down to primaries, postfix subscripts/calls, filters and tests.
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/parser_impl.h"

namespace pg::jinja::parse {

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

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
      op = t == "=="   ? CmpOp::kEq
           : t == "!=" ? CmpOp::kNe
           : t == "<"  ? CmpOp::kLt
           : t == "<=" ? CmpOp::kLe
           : t == ">"  ? CmpOp::kGt
                       : CmpOp::kGe;
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
      return unsupported("template error at {}:{}: *args / **kwargs in calls are not supported", cur().pos.line,
                         cur().pos.col);
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
    const int fn = find_filter(name);  // unknown (-1): NameChecker decides whether that is an error
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

}  // namespace pg::jinja::parse
