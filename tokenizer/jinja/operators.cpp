// Python's operators on template values: arithmetic with CPython's int/float rules (floor
// division, modulo sign, true division), sequence concatenation/repetition, printf-style
// `str % args`, comparisons, `in`, hashing for dict keys and slice index arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

Status type_error_binop(const char* op, const Value& a, const Value& b, Pos pos) {
  return rt_error(pos, "unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

Status overflow(Pos pos) { return rt_error(pos, "integer overflow (template integers are 64-bit)"); }

// CPython float_divmod.
void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

Result<Value> repeat(Interp& in, const Value& seq, int64_t n, Pos pos) {
  if (n < 0) n = 0;
  if (seq.is_str()) {
    const Str& s = seq.as_str();
    if (!s.s.empty() && static_cast<uint64_t>(n) > in.options().limits.max_output_bytes / s.s.size())
      return resource_exhausted("template error at {}:{}: string repetition exceeds max_output_bytes", pos.line,
                                pos.col);
    StrBuilder b;
    for (int64_t i = 0; i < n; ++i) b.append(s);
    return in.make_str(b, pos, s.markup);
  }
  const ListObj& l = seq.as_list();
  if (!l.items.empty() &&
      static_cast<uint64_t>(n) > (in.options().limits.max_memory_bytes / sizeof(Value)) / l.items.size())
    return resource_exhausted("template error at {}:{}: list repetition exceeds max_memory_bytes", pos.line, pos.col);
  PG_TRY(in.step(static_cast<uint64_t>(n) * l.items.size() / 8));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n) * l.items.size());
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
  return in.make_list(std::move(items), l.kind, pos);
}

bool is_concat_seq(const Value& v) {
  return v.is_list() && (v.as_list().kind == ListKind::kList || v.as_list().kind == ListKind::kTuple);
}

// printf-style `fmt % args` (str.__mod__) for the conversions templates use.
Result<Value> percent_format(Interp& in, const Value& fmt_v, const Value& args, Pos pos) {
  const std::string& f = fmt_v.sv();
  std::vector<Value> values;
  const DictObj* mapping = nullptr;
  if (args.is_list() && args.as_list().kind == ListKind::kTuple) {
    values = args.as_list().items;
  } else {
    if (args.is_dict()) mapping = &args.as_dict();
    values.push_back(args);
  }
  // CPython treats any non-tuple, non-str argument with __getitem__ as a mapping, and then does
  // not complain about unused arguments.
  const bool mapping_like =
      args.is_dict() || args.is_undefined() ||
      (args.is_list() && args.as_list().subscriptable() && args.as_list().kind != ListKind::kTuple);
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) return rt_error(pos, "incomplete format");
    const Value* arg = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) return rt_error(pos, "incomplete format key");
      if (mapping == nullptr) return rt_error(pos, "format requires a mapping");
      arg = mapping->find_str(std::string_view(f).substr(i + 1, close - i - 1));
      if (arg == nullptr) return rt_error(pos, "KeyError: '{}'", f.substr(i + 1, close - i - 1));
      used_mapping = true;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos && spec.size() < 8)
      spec.push_back(f[i++]);
    for (int n = 0; i < f.size() && f[i] >= '0' && f[i] <= '9'; ++n) {
      if (n == 5) return rt_error(pos, "format width too large");
      spec.push_back(f[i++]);
    }
    if (i < f.size() && f[i] == '.') {
      spec.push_back(f[i++]);
      for (int n = 0; i < f.size() && f[i] >= '0' && f[i] <= '9'; ++n) {
        if (n == 5) return rt_error(pos, "format precision too large");
        spec.push_back(f[i++]);
      }
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) return rt_error(pos, "incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (next_arg >= values.size()) return rt_error(pos, "not enough arguments for format string");
      arg = &values[next_arg++];
    }
    // Width/precision beyond 5 digits would only pad: refuse them rather than build huge strings.
    if (spec.size() > 12) return rt_error(pos, "format specification too long");
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? to_str(*arg, in.str_limit()) : to_repr(*arg, in.str_limit());
        // Width and precision count code points; only '-' matters among the flags.
        const bool left = spec.find('-') != std::string::npos;
        size_t width = 0, prec = std::string::npos;
        size_t k = 1;
        while (k < spec.size() && !(spec[k] >= '1' && spec[k] <= '9') && spec[k] != '.') ++k;
        while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9')
          width = width * 10 + static_cast<size_t>(spec[k++] - '0');
        if (k < spec.size() && spec[k] == '.') {
          prec = 0;
          ++k;
          while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9')
            prec = prec * 10 + static_cast<size_t>(spec[k++] - '0');
        }
        if (prec != std::string::npos) {
          auto offs = py::cp_offsets(s);
          if (prec + 1 < offs.size()) s.resize(offs[prec]);
        }
        const size_t n = py::cp_count(s);
        if (width > n && !left) out.append(width - n, ' ');
        out += s;
        if (width > n && left) out.append(width - n, ' ');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        int64_t v;
        if (arg->is_integral()) {
          v = arg->as_int();
        } else if (arg->is_float() && (conv == 'd' || conv == 'i' || conv == 'u') && std::isfinite(arg->as_double()) &&
                   std::fabs(arg->as_double()) < 9.2e18) {
          v = static_cast<int64_t>(arg->as_double());
        } else {
          return rt_error(pos, "%{} format: a number is required, not {}", conv, type_name(*arg));
        }
        const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        // C leaves '#' with d undefined; Python ignores it there.
        if (c == 'd') spec.erase(std::remove(spec.begin(), spec.end(), '#'), spec.end());
        if (c == 'o' && spec.find('#') != std::string::npos) {
          // Python's alternate octal form is "0o..." (C's is "0..."): pad it by hand.
          spec.erase(std::remove(spec.begin(), spec.end(), '#'), spec.end());
          const bool left = spec.find('-') != std::string::npos;
          const bool zero = !left && spec.find('0') == 1;
          size_t width = 0;
          for (char ch : spec)
            if (ch >= '0' && ch <= '9' && !(ch == '0' && width == 0))
              width = width * 10 + static_cast<size_t>(ch - '0');
          std::string digits = cformat("%llo", static_cast<long long>(v < 0 ? -static_cast<unsigned long long>(v) : v));
          std::string head = std::string(v < 0 ? "-" : (spec.find('+') != std::string::npos ? "+" : "")) + "0o";
          const size_t n = head.size() + digits.size();
          if (width > n && zero) digits.insert(0, width - n, '0');
          std::string body = head + digits;
          if (width > body.size()) body.insert(left ? body.size() : 0, width - body.size(), ' ');
          out += body;
          break;
        }
        out += cformat(spec + "ll" + c, static_cast<long long>(v));
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) return rt_error(pos, "must be real number, not {}", type_name(*arg));
        out += cformat(spec + conv, arg->as_double());
        break;
      }
      case 'c': {
        if (arg->is_str() && py::cp_count(arg->sv()) == 1) {
          out += arg->sv();
        } else if (arg->is_integral() && arg->as_int() >= 0 && arg->as_int() <= 0x10FFFF &&
                   !(arg->as_int() >= 0xD800 && arg->as_int() <= 0xDFFF)) {  // no surrogates: output stays UTF-8
          py::append_utf8(out, static_cast<char32_t>(arg->as_int()));
        } else {
          return rt_error(pos, "%c requires int or char");
        }
        break;
      }
      default: return rt_error(pos, "unsupported format character '{}'", conv);
    }
    if (out.size() > in.options().limits.max_output_bytes)
      return resource_exhausted("template error at {}:{}: formatted string exceeds max_output_bytes", pos.line,
                                pos.col);
  }
  if (!used_mapping && !mapping_like && next_arg < values.size())
    return rt_error(pos, "not all arguments converted during string formatting");
  return in.make_str(std::move(out), false, pos);
}

}  // namespace

namespace {

template <typename... T>
std::string cformat_impl(const std::string& f, T... v) {
  const int n = std::snprintf(nullptr, 0, f.c_str(), v...);
  if (n <= 0) return {};
  std::string s(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(s.data(), s.size(), f.c_str(), v...);
  s.resize(static_cast<size_t>(n));
  return s;
}

}  // namespace

std::string cformat(const std::string& f, long long v) { return cformat_impl(f, v); }
std::string cformat(const std::string& f, double v) { return cformat_impl(f, v); }
std::string cformat(const std::string& f, int precision, double v) { return cformat_impl(f, precision, v); }

void escape_into(StrBuilder& b, const Str& s) {
  size_t begin = 0;
  for (const Run& r : s.runs) {
    std::string out;
    for (size_t i = begin; i < r.end; ++i) {
      switch (s.s[i]) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out.push_back(s.s[i]);
      }
    }
    b.append(out, r.literal);
    begin = r.end;
  }
}

Result<Value> binary_op(Interp& in, BinOp op, const Value& a, const Value& b, Pos pos) {
  // str.__mod__ runs before any reflected operator of the right operand (even an Undefined).
  if (op == BinOp::kMod && a.is_str()) return percent_format(in, a, b, pos);
  if (a.is_undefined()) return undefined_error(a, pos);
  if (b.is_undefined()) return undefined_error(b, pos);
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::kAdd:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow(pos);
        return Value::integer(r);
      }
      if (nums) return Value::floating(a.as_double() + b.as_double());
      if (a.is_str() && b.is_str()) {
        if (a.sv().size() + b.sv().size() > in.options().limits.max_output_bytes)
          return resource_exhausted("template error at {}:{}: string exceeds max_output_bytes", pos.line, pos.col);
        // Markup + str escapes the str (and str + Markup goes through Markup.__radd__).
        const bool markup = a.as_str().markup || b.as_str().markup;
        StrBuilder sb;
        if (markup && !a.as_str().markup)
          escape_into(sb, a.as_str());
        else
          sb.append(a.as_str());
        if (markup && !b.as_str().markup)
          escape_into(sb, b.as_str());
        else
          sb.append(b.as_str());
        return in.make_str(sb, pos, markup);
      }
      if (is_concat_seq(a) && is_concat_seq(b) && a.as_list().kind == b.as_list().kind) {
        PG_TRY(in.list_fits(a.as_list().items.size() + b.as_list().items.size(), pos));  // before the copy
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return in.make_list(std::move(items), a.as_list().kind, pos);
      }
      if (a.is_str()) return rt_error(pos, "can only concatenate str (not \"{}\") to str", type_name(b));
      if (is_concat_seq(a))
        return rt_error(pos, "can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
      return type_error_binop("+", a, b, pos);
    case BinOp::kSub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow(pos);
        return Value::integer(r);
      }
      if (nums) return Value::floating(a.as_double() - b.as_double());
      return type_error_binop("-", a, b, pos);
    case BinOp::kMul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow(pos);
        return Value::integer(r);
      }
      if (nums) return Value::floating(a.as_double() * b.as_double());
      if ((a.is_str() || is_concat_seq(a)) && b.is_integral()) return repeat(in, a, b.as_int(), pos);
      if ((b.is_str() || is_concat_seq(b)) && a.is_integral()) return repeat(in, b, a.as_int(), pos);
      return type_error_binop("*", a, b, pos);
    case BinOp::kDiv:
      if (nums) {
        if (b.as_double() == 0.0) return rt_error(pos, "division by zero");
        return Value::floating(a.as_double() / b.as_double());
      }
      return type_error_binop("/", a, b, pos);
    case BinOp::kFloorDiv:
    case BinOp::kMod:
      if (op == BinOp::kMod && a.is_str()) return percent_format(in, a, b, pos);
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (y == 0)
          return rt_error(pos, "{}",
                          op == BinOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == BinOp::kMod) return Value::integer(0);
          return overflow(pos);
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          --q;
        }
        return Value::integer(op == BinOp::kMod ? r : q);
      }
      if (nums) {
        if (b.as_double() == 0.0)
          return rt_error(pos, "{}", op == BinOp::kMod ? "float modulo" : "float floor division by zero");
        double q, r;
        float_divmod(a.as_double(), b.as_double(), q, r);
        return Value::floating(op == BinOp::kMod ? r : q);
      }
      return type_error_binop(op == BinOp::kMod ? "%" : "//", a, b, pos);
    case BinOp::kPow:
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), r = 1;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow(pos);
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow(pos);
        }
        return Value::integer(r);
      }
      if (nums) {
        const double x = a.as_double(), y = b.as_double();
        if (x == 0.0 && y < 0) return rt_error(pos, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) return rt_error(pos, "complex results are not supported");
        const double r = std::pow(x, y);
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          return rt_error(pos, "numerical result out of range");
        return Value::floating(r);
      }
      return type_error_binop("** or pow()", a, b, pos);
  }
  return rt_error(pos, "bad operator");
}

Result<Value> unary_minus(const Value& a, Pos pos, bool negate) {
  if (a.is_undefined()) return undefined_error(a, pos);
  if (a.is_integral()) {
    if (!negate) return Value::integer(a.as_int());
    if (a.as_int() == std::numeric_limits<int64_t>::min()) return overflow(pos);
    return Value::integer(-a.as_int());
  }
  if (a.is_float()) return Value::floating(negate ? -a.as_double() : a.as_double());
  return rt_error(pos, "bad operand type for unary {}: '{}'", negate ? "-" : "+", type_name(a));
}

namespace {

bool int_float_eq(int64_t i, double d) {
  if (!std::isfinite(d) || d != std::floor(d) || d < -9.3e18 || d > 9.3e18) return false;
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) return false;
  return static_cast<int64_t>(d) == i;
}

bool seq_like(const ListObj& l) { return l.kind != ListKind::kIterator; }

}  // namespace

bool py_eq(const Value& a, const Value& b, int depth, CompareWork* work) {
  if (depth > kMaxValueDepth || (work != nullptr && work->over())) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
    return a.is_float() ? int_float_eq(b.as_int(), a.as_double()) : int_float_eq(a.as_int(), b.as_double());
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kStr:
      if (a.str_ptr() == b.str_ptr()) return true;
      if (a.sv().size() != b.sv().size()) return false;
      if (work != nullptr && (work->used += a.sv().size(), work->over())) return false;
      return a.sv() == b.sv();
    case Kind::kList: {
      const ListObj& x = a.as_list();
      const ListObj& y = b.as_list();
      if (x.kind != y.kind || !seq_like(x)) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      if (work != nullptr) work->used += x.items.size();
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_eq(x.items[i], y.items[i], depth + 1, work)) return false;
      return true;
    }
    case Kind::kDict: {
      const DictObj& x = a.as_dict();
      const DictObj& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      if (work != nullptr) work->used += x.items.size();
      for (const auto& [k, v] : x.items) {
        const Value* other = dict_get(y, k);
        if (other == nullptr || !py_eq(v, *other, depth + 1, work)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

Result<bool> py_lt(const Value& a, const Value& b, Pos pos, int depth, CompareWork* work) {
  if (a.is_undefined()) return undefined_error(a, pos);
  if (b.is_undefined()) return undefined_error(b, pos);
  if (depth > kMaxValueDepth) return rt_error(pos, "values nested too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_str() && b.is_str()) {
    if (work != nullptr) work->used += std::min(a.sv().size(), b.sv().size());
    return a.sv() < b.sv();  // UTF-8 byte order is code point order
  }
  if (a.is_list() && b.is_list() && a.as_list().kind == b.as_list().kind &&
      (a.as_list().kind == ListKind::kList || a.as_list().kind == ListKind::kTuple)) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (work != nullptr && work->over()) return false;
      if (py_eq(x[i], y[i], depth + 1, work)) continue;
      return py_lt(x[i], y[i], pos, depth + 1, work);
    }
    return x.size() < y.size();
  }
  return rt_error(pos, "'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

Result<bool> compare(Interp& in, CmpOp op, const Value& a, const Value& b, Pos pos) {
  CompareWork work = in.compare_work();
  switch (op) {
    case CmpOp::kEq:
    case CmpOp::kNe: {
      const bool eq = py_eq(a, b, 0, &work);
      PG_TRY(in.charge(work));
      return eq == (op == CmpOp::kEq);
    }
    case CmpOp::kIn: return contains(in, b, a, pos);
    case CmpOp::kNotIn: {
      PG_ASSIGN_OR_RETURN(bool r, contains(in, b, a, pos));
      return !r;
    }
    default: break;
  }
  if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {  // NaN compares false every way
    const double x = a.as_double(), y = b.as_double();
    switch (op) {
      case CmpOp::kLt: return x < y;
      case CmpOp::kLe: return x <= y;
      case CmpOp::kGt: return x > y;
      default: return x >= y;
    }
  }
  switch (op) {
    case CmpOp::kLt:
    case CmpOp::kGt:
    case CmpOp::kLe:
    default: {
      // a > b is b < a; a <= b is not b < a; a >= b is not a < b (total orders here).
      const bool swap = op == CmpOp::kGt || op == CmpOp::kLe;
      PG_ASSIGN_OR_RETURN(bool r, swap ? py_lt(b, a, pos, 0, &work) : py_lt(a, b, pos, 0, &work));
      PG_TRY(in.charge(work));
      return (op == CmpOp::kLt || op == CmpOp::kGt) ? r : !r;
    }
  }
}

Result<bool> contains(Interp& in, const Value& container, const Value& item, Pos pos) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kStr:
      if (!item.is_str())
        return rt_error(pos, "'in <string>' requires string as left operand, not {}", type_name(item));
      PG_TRY(in.charge_bytes(container.sv().size()));
      return py::find(container.sv(), item.sv()) != std::string::npos;
    case Kind::kDict: {
      if (item.is_str()) PG_TRY(in.charge_bytes(item.sv().size()));  // the lookup copies the key
      if (!hash_key(item)) return rt_error(pos, "unhashable type: '{}'", type_name(item));
      return dict_get(container.as_dict(), item) != nullptr;
    }
    case Kind::kList:
    case Kind::kLoop: {
      PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(container, pos));
      CompareWork work = in.compare_work();
      work.used += items.size();
      bool found = false;
      for (const Value& v : items)
        if ((found = py_eq(v, item, 0, &work)) || work.over()) break;
      PG_TRY(in.charge(work));
      return found;
    }
    default: return rt_error(pos, "argument of type '{}' is not iterable", type_name(container));
  }
}

namespace {
constexpr size_t kMaxKeyBytes = size_t{64} << 20;
}  // namespace

std::optional<std::string> hash_key(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return std::nullopt;
  switch (v.kind()) {
    case Kind::kUndefined: return std::string("U");
    case Kind::kNone: return std::string("N");
    case Kind::kBool:
    case Kind::kInt: return "i" + std::to_string(v.as_int());
    case Kind::kFloat: {
      const double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return "i" + std::to_string(static_cast<int64_t>(d));
      return "f" + py::float_repr(d);
    }
    case Kind::kStr: return "s" + v.sv();
    case Kind::kList: {
      const ListObj& l = v.as_list();
      if (l.kind == ListKind::kTuple) {
        std::string k = "t";
        for (const Value& x : l.items) {
          auto sub = hash_key(x, depth + 1);
          // Keys are built as strings: a tuple repeating one huge string must not build a huge key.
          if (!sub || k.size() + sub->size() > kMaxKeyBytes) return std::nullopt;
          k += std::to_string(sub->size()) + ":" + *sub;
        }
        return k;
      }
      if (l.kind == ListKind::kIterator) return fmt::format("p{}", fmt::ptr(v.identity()));
      if (l.kind == ListKind::kRange) {  // ranges hash by the sequence they describe
        const size_t n = l.items.size();
        return fmt::format("r{}:{}:{}", n, n > 0 ? l.range_start : 0, n > 1 ? l.range_step : 0);
      }
      return std::nullopt;
    }
    case Kind::kDict: return std::nullopt;
    default: return fmt::format("p{}", fmt::ptr(v.identity()));
  }
}

const Value* dict_get(const DictObj& d, const Value& key) {
  if (key.is_str()) return d.find_str(key.sv());
  auto k = hash_key(key);
  if (!k) return nullptr;
  auto it = d.index.find(*k);
  return it == d.index.end() ? nullptr : &d.items[it->second].second;
}

Status slice_indices(const Value& start_v, const Value& stop_v, const Value& step_v, int64_t n,
                     std::vector<int64_t>& out, Pos pos, bool& type_error, int64_t bounds[3]) {
  type_error = false;
  auto ok_type = [](const Value& v) { return v.is_none() || v.is_integral(); };
  if (!ok_type(start_v) || !ok_type(stop_v) || !ok_type(step_v)) {
    type_error = true;
    return ok_status();
  }
  const int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) return rt_error(pos, "slice step cannot be zero");
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? n : n - 1;
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t x = v.as_int();
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t start = adjust(start_v, step > 0 ? lower : upper);
  const int64_t stop = adjust(stop_v, step > 0 ? upper : lower);
  if (bounds != nullptr) {
    bounds[0] = start;
    bounds[1] = stop;
    bounds[2] = step;
  }
  // All indices lie in [0, n), so the loop runs at most n times; the guards stop before overflow.
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) {
      out.push_back(i);
      if (step > stop - i) break;
    }
  } else {
    for (int64_t i = start; i > stop; i += step) {
      out.push_back(i);
      if (step <= stop - i) break;
    }
  }
  return ok_status();
}

bool parse_py_int(std::string_view s, int base, int64_t& out) {
  const auto r = py::strip_range(s, nullptr, true, true);
  s = s.substr(r.begin, r.end - r.begin);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) {
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (s.empty()) return false;
  uint64_t v = 0;
  bool prev_digit = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return false;
      prev_digit = false;
      continue;
    }
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
      d = (c | 0x20) - 'a' + 10;
    else
      return false;
    if (d >= base) return false;
    if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (neg ? 1 : 0) - static_cast<uint64_t>(d)) /
                static_cast<uint64_t>(base))
      return false;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    prev_digit = true;
  }
  out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

bool parse_py_float(std::string_view s, double& out) {
  const auto r = py::strip_range(s, nullptr, true, true);
  s = s.substr(r.begin, r.end - r.begin);
  std::string t;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) t.push_back(s[i++]);
  std::string rest;
  for (size_t k = i; k < s.size(); ++k)
    rest.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[k]))));
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    t += rest;
    out = std::strtod(t.c_str(), nullptr);
    return true;
  }
  // digits[.digits][e[+-]digits] with single underscores between digits
  bool any_digit = false;
  auto digits = [&]() {
    bool prev = false, got = false;
    while (i < s.size()) {
      if (s[i] >= '0' && s[i] <= '9') {
        t.push_back(s[i++]);
        prev = got = true;
      } else if (s[i] == '_' && prev && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
        ++i;
        prev = false;
      } else {
        break;
      }
    }
    return got;
  };
  any_digit = digits();
  if (i < s.size() && s[i] == '.') {
    t.push_back(s[i++]);
    any_digit = digits() || any_digit;
  }
  if (!any_digit) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    t.push_back(s[i++]);
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) t.push_back(s[i++]);
    if (!digits()) return false;
  }
  if (i != s.size()) return false;
  out = std::strtod(t.c_str(), nullptr);
  return true;
}

}  // namespace pg::jinja
