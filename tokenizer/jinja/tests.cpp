// Jinja2 3.1's builtin tests (jinja2/tests.py): `x is defined`, `is odd`, `is divisibleby 3`,
// comparison aliases (eq/==, lt/<, ...), `is in`, `is sameas`. Each checks its argument count.
#include <cstddef>
#include <iterator>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

using TestFn = Result<bool> (*)(Interp&, const Value&, const CallArgs&, Pos);

Result<bool> num_mod(Interp& in, const Value& v, const Value& d, Pos pos, int64_t& out_is_zero) {
  PG_ASSIGN_OR_RETURN(Value r, binary_op(in, BinOp::kMod, v, d, pos));
  out_is_zero = py_eq(r, Value::integer(0)) ? 1 : 0;
  return true;
}

Result<bool> t_defined(Interp&, const Value& v, const CallArgs&, Pos) { return !v.is_undefined(); }
Result<bool> t_undefined(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_undefined(); }
Result<bool> t_none(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_none(); }
Result<bool> t_boolean(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool(); }
Result<bool> t_true(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool() && v.as_bool(); }
Result<bool> t_false(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_bool() && !v.as_bool(); }
Result<bool> t_integer(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_int(); }
Result<bool> t_float(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_float(); }
Result<bool> t_number(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_number(); }
Result<bool> t_string(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str(); }
Result<bool> t_mapping(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_dict(); }
// Undefined defines __call__ (to raise), so callable() says yes.
Result<bool> t_callable(Interp&, const Value& v, const CallArgs&, Pos) {
  return v.kind() == Kind::kFunc || v.is_undefined();
}
Result<bool> t_escaped(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && v.as_str().markup; }
Result<bool> t_iterable(Interp&, const Value& v, const CallArgs&, Pos) {
  return v.is_undefined() || v.is_str() || v.is_list() || v.is_dict() || v.kind() == Kind::kLoop;
}
Result<bool> t_sequence(Interp&, const Value& v, const CallArgs&, Pos) {
  return v.is_undefined() || v.is_str() || v.is_dict() || (v.is_list() && v.as_list().subscriptable());
}
Result<bool> t_even(Interp& in, const Value& v, const CallArgs&, Pos pos) {
  int64_t zero;
  PG_TRY(num_mod(in, v, Value::integer(2), pos, zero).status());
  return zero == 1;
}
Result<bool> t_odd(Interp& in, const Value& v, const CallArgs&, Pos pos) {
  PG_ASSIGN_OR_RETURN(Value r, binary_op(in, BinOp::kMod, v, Value::integer(2), pos));
  return py_eq(r, Value::integer(1));
}
Result<bool> t_divisibleby(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"num"}, 1, a, "divisibleby", pos));
  int64_t zero;
  PG_TRY(num_mod(in, v, *a[0], pos, zero).status());
  return zero == 1;
}
Result<bool> t_lower(Interp& in, const Value& v, const CallArgs&, Pos) {
  const std::string s = to_str(v, in.str_limit());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = py::next_cp(s, i);
    if (py::is_upper(c)) return false;
    cased |= py::is_cased(c);
  }
  return cased;
}
Result<bool> t_upper(Interp& in, const Value& v, const CallArgs&, Pos) {
  const std::string s = to_str(v, in.str_limit());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = py::next_cp(s, i);
    if (py::is_lower(c)) return false;
    cased |= py::is_cased(c);
  }
  return cased;
}
Result<bool> t_filter(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && find_filter(v.sv()) >= 0; }
Result<bool> t_test(Interp&, const Value& v, const CallArgs&, Pos) { return v.is_str() && find_test(v.sv()) >= 0; }

template <CmpOp kOp>
Result<bool> t_cmp(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"other"}, 1, a, "comparison test", pos));
  return compare(in, kOp, v, *a[0], pos);
}
Result<bool> t_in(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"seq"}, 1, a, "in", pos));
  return contains(in, *a[0], v, pos);
}
Result<bool> t_sameas(Interp&, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"other"}, 1, a, "sameas", pos));
  const Value& o = *a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kUndefined: return v.is_none() || v.identity() == o.identity();
    case Kind::kBool: return v.as_bool() == o.as_bool();
    case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's small ints
    case Kind::kFloat: return false;
    default: return v.identity() == o.identity();
  }
}

struct TestDef {
  std::string_view name;
  TestFn fn;
  size_t max_args = 0;  // arguments after the tested value
};

constexpr TestDef kTests[] = {
    {"!=", t_cmp<CmpOp::kNe>, 1},
    {"<", t_cmp<CmpOp::kLt>, 1},
    {"<=", t_cmp<CmpOp::kLe>, 1},
    {"==", t_cmp<CmpOp::kEq>, 1},
    {">", t_cmp<CmpOp::kGt>, 1},
    {">=", t_cmp<CmpOp::kGe>, 1},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby, 1},
    {"eq", t_cmp<CmpOp::kEq>, 1},
    {"equalto", t_cmp<CmpOp::kEq>, 1},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_cmp<CmpOp::kGe>, 1},
    {"greaterthan", t_cmp<CmpOp::kGt>, 1},
    {"gt", t_cmp<CmpOp::kGt>, 1},
    {"in", t_in, 1},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_cmp<CmpOp::kLe>, 1},
    {"lessthan", t_cmp<CmpOp::kLt>, 1},
    {"lower", t_lower},
    {"lt", t_cmp<CmpOp::kLt>, 1},
    {"mapping", t_mapping},
    {"ne", t_cmp<CmpOp::kNe>, 1},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas, 1},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

int find_test(std::string_view name) {
  for (size_t i = 0; i < std::size(kTests); ++i)
    if (kTests[i].name == name) return static_cast<int>(i);
  return -1;
}
Result<bool> Interp::apply_test(int fn, const Value& input, const CallArgs& args, Pos pos) {
  PG_TRY(step());
  if (fn < 0) return internal_error("template error at {}:{}: unknown test", pos.line, pos.col);
  const TestDef& t = kTests[static_cast<size_t>(fn)];
  if (args.pos.size() + args.kw.size() > t.max_args)
    return rt_error(pos, "test '{}' takes {} argument(s) but {} were given", t.name, t.max_args + 1,
                    args.pos.size() + args.kw.size() + 1);
  return kTests[static_cast<size_t>(fn)].fn(*this, input, args, pos);
}
}  // namespace pg::jinja
