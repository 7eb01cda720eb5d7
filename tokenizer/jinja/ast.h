// Syntax tree of a parsed template: expression and statement nodes shaped like jinja2/nodes.py,
// reduced to the constructs chat templates use. Built by parser.cpp, walked by interpreter.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/value.h"

namespace pg::jinja {

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kNsRef,    // assignment target `ns.attr`: name = ns, attr
  kGetattr,  // args[0].name
  kGetitem,  // args[0][args[1]]  (args[1] may be a kSlice)
  kSlice,    // args[0]:args[1]:args[2], each may be null
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs); args[0] is null for {% filter %} / {% set %} blocks
  kTest,     // args[0] is name(args[1..], kwargs)
  kNeg,
  kPos,
  kNot,
  kBinary,  // args[0] bin args[1]
  kAnd,
  kOr,
  kConcat,    // args joined with ~
  kCompare,   // args[0] cmp[0] args[1] cmp[1] args[2] ...
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  kList,
  kTuple,
  kDict,  // args: key0, value0, key1, value1, ...
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  Pos pos;
  int depth = 1;  // height of this subtree; bounded by the parser
  Value value;
  std::string name;
  std::string attr;
  BinOp bin = BinOp::kAdd;
  std::vector<CmpOp> cmp;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int fn = -1;  // kFilter / kTest: index into the filter or test table
};

enum class StmtKind : uint8_t {
  kText,         // literal template text (text)
  kPrint,        // {{ exprs[0] }} or {% print a, b %}
  kIf,           // exprs[0]; body; else_body (elif chains nest as an If in else_body)
  kFor,          // target in exprs[0] [if exprs[1]]; body; else_body
  kSet,          // target = exprs[0]
  kSetBlock,     // {% set target | filter %}body{% endset %}; filter in exprs[0] (may be absent)
  kMacro,        // {% macro name(params=defaults) %}body
  kCallBlock,    // {% call(params) exprs[0] %}body  -- body becomes caller()
  kFilterBlock,  // {% filter exprs[0] %}body
  kWith,         // {% with targets = exprs %}body
  kScope,        // {% generation %}body: transformers' assistant-mask tag, rendered as its body
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Pos pos;
  Value text;
  std::vector<ExprPtr> exprs;
  ExprPtr target;
  std::vector<ExprPtr> targets;
  std::vector<StmtPtr> body;
  std::vector<StmtPtr> else_body;
  // kMacro / kCallBlock signature; defaults belong to the last defaults.size() params.
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  bool catch_varargs = false;
  bool catch_kwargs = false;
  bool uses_caller = false;
};

struct Program {
  std::vector<StmtPtr> body;
};

}  // namespace pg::jinja
