// Exact conversions between float32 and the narrow float formats (see dtype.h).
#include "core/dtype.h"

#include <array>
#include <cmath>

#include "core/check.h"

namespace pg {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF64: return "f64";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "f8_e4m3";
    case DType::kF8E5M2: return "f8_e5m2";
    case DType::kE2M1: return "e2m1";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

namespace {
struct StName { std::string_view name; DType t; };
constexpr StName kStNames[] = {
    {"F64", DType::kF64},   {"F32", DType::kF32},       {"F16", DType::kF16},
    {"BF16", DType::kBF16}, {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2},
    {"F4", DType::kE2M1},   {"I64", DType::kI64},       {"I32", DType::kI32},
    {"I16", DType::kI16},   {"I8", DType::kI8},         {"U8", DType::kU8},
    {"BOOL", DType::kBool},
};
}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& n : kStNames)
    if (n.name == name) return n.t;
  return std::nullopt;
}

std::string_view dtype_safetensors_name(DType t) {
  for (const auto& n : kStNames)
    if (n.t == t) return n.name;
  return "?";
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 64;
    case DType::kF32: case DType::kI32: return 32;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 16;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kI8: case DType::kU8: case DType::kBool: return 8;
    case DType::kE2M1: return 4;
  }
  return 0;
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::kF64: case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kE2M1: return true;
    default: return false;
  }
}

// ---- generic minifloat --------------------------------------------------------------------
const MiniFloatSpec kSpecF16{5, 10, 15, MiniFloatSpec::Special::kIeee};
const MiniFloatSpec kSpecBF16{8, 7, 127, MiniFloatSpec::Special::kIeee};
const MiniFloatSpec kSpecE4M3{4, 3, 7, MiniFloatSpec::Special::kFnNaNOnly};
const MiniFloatSpec kSpecE5M2{5, 2, 15, MiniFloatSpec::Special::kIeee};
const MiniFloatSpec kSpecE2M1{2, 1, 1, MiniFloatSpec::Special::kNone};

double MiniFloatSpec::max_finite() const {
  const int e_max_field = (1 << exp_bits) - 1;
  switch (special) {
    case Special::kIeee:  // top exponent reserved: largest is (2 - 2^-m) * 2^(emax-1-bias)
      return std::ldexp(2.0 - std::ldexp(1.0, -man_bits), e_max_field - 1 - bias);
    case Special::kFnNaNOnly:  // only S.1..1.1..1 is NaN: largest mantissa is 1..10
      return std::ldexp(2.0 - std::ldexp(2.0, -man_bits), e_max_field - bias);
    case Special::kNone:
      return std::ldexp(2.0 - std::ldexp(1.0, -man_bits), e_max_field - bias);
  }
  return 0;
}

double minifloat_decode(const MiniFloatSpec& s, uint32_t code) {
  const uint32_t man_mask = (1u << s.man_bits) - 1;
  const uint32_t exp_mask = (1u << s.exp_bits) - 1;
  const bool neg = (code >> (s.exp_bits + s.man_bits)) & 1u;
  const uint32_t e = (code >> s.man_bits) & exp_mask;
  const uint32_t m = code & man_mask;
  double v;
  if (s.special == MiniFloatSpec::Special::kIeee && e == exp_mask) {
    v = m == 0 ? INFINITY : NAN;
  } else if (s.special == MiniFloatSpec::Special::kFnNaNOnly && e == exp_mask && m == man_mask) {
    v = NAN;
  } else if (e == 0) {  // zero or subnormal: m * 2^(1 - bias - man_bits)
    v = std::ldexp(double(m), 1 - s.bias - s.man_bits);
  } else {
    v = std::ldexp(double(m | (1u << s.man_bits)), int(e) - s.bias - s.man_bits);
  }
  return neg ? -v : v;
}

uint32_t minifloat_encode(const MiniFloatSpec& s, float x, Overflow ov) {
  const int total_bits = 1 + s.exp_bits + s.man_bits;
  const uint32_t sign = std::signbit(x) ? (1u << (total_bits - 1)) : 0u;
  const uint32_t exp_mask = (1u << s.exp_bits) - 1;
  const uint32_t man_mask = (1u << s.man_bits) - 1;
  const uint32_t max_code = s.special == MiniFloatSpec::Special::kFnNaNOnly
                                ? (exp_mask << s.man_bits) | (man_mask - 1)
                            : s.special == MiniFloatSpec::Special::kIeee
                                ? ((exp_mask - 1) << s.man_bits) | man_mask
                                : (exp_mask << s.man_bits) | man_mask;
  auto nan_code = [&]() -> uint32_t {
    switch (s.special) {
      case MiniFloatSpec::Special::kIeee:  // quiet NaN: top mantissa bit set
        return sign | (exp_mask << s.man_bits) | (1u << (s.man_bits - 1));
      case MiniFloatSpec::Special::kFnNaNOnly:
        return sign | (exp_mask << s.man_bits) | man_mask;
      case MiniFloatSpec::Special::kNone:
        return max_code;  // documented: NaN -> +max
    }
    return 0;
  };
  auto overflow_code = [&]() -> uint32_t {
    if (ov == Overflow::kSaturate || s.special == MiniFloatSpec::Special::kNone) return sign | max_code;
    if (s.special == MiniFloatSpec::Special::kIeee) return sign | (exp_mask << s.man_bits);  // inf
    return nan_code();
  };
  if (std::isnan(x)) return nan_code();
  const double a = std::fabs(double(x));
  if (std::isinf(a)) return overflow_code();
  if (a == 0) return sign;
  const int emin = 1 - s.bias;  // exponent of the smallest normal
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)  =>  floor(log2 a) = e - 1
  int exp_unb = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exp_unb - s.man_bits);
  const double r = std::nearbyint(a / quantum);  // exact division (power of two); RNE
  const double v = r * quantum;
  if (v > s.max_finite()) return overflow_code();
  if (v == 0) return sign;
  if (v < std::ldexp(1.0, emin)) {  // subnormal
    return sign | uint32_t(r);
  }
  std::frexp(v, &e);
  exp_unb = e - 1;
  const uint32_t man = uint32_t(std::ldexp(v, s.man_bits - exp_unb)) - (1u << s.man_bits);
  return sign | (uint32_t(exp_unb + s.bias) << s.man_bits) | man;
}

// ---- fast paths ---------------------------------------------------------------------------
namespace {
template <const MiniFloatSpec& S>
std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = float(minifloat_decode(S, c));
  return t;
}
const std::array<float, 256> kE4M3Table = make_table<kSpecE4M3>();
const std::array<float, 256> kE5M2Table = make_table<kSpecE5M2>();
}  // namespace

float f8e4m3_to_f32(uint8_t v) { return kE4M3Table[v]; }
const float* f8e4m3_table() { return kE4M3Table.data(); }
float f8e5m2_to_f32(uint8_t v) { return kE5M2Table[v]; }
uint8_t f32_to_f8e4m3(float f, Overflow ov) { return uint8_t(minifloat_encode(kSpecE4M3, f, ov)); }
uint8_t f32_to_f8e5m2(float f, Overflow ov) { return uint8_t(minifloat_encode(kSpecE5M2, f, ov)); }
float e2m1_to_f32(uint8_t nibble) { return kE2M1Values[nibble & 0xf]; }
uint8_t f32_to_e2m1(float f) { return uint8_t(minifloat_encode(kSpecE2M1, f, Overflow::kSaturate)); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_to_f32(sign | 0x7f800000u | (m << 13));  // inf / NaN (payload kept)
  if (e == 0) {
    if (m == 0) return bits_to_f32(sign);
    // subnormal: m * 2^-24, exact in f32
    const float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t f32_to_f16(float f) { return uint16_t(minifloat_encode(kSpecF16, f, Overflow::kInfOrNaN)); }

}  // namespace pg
