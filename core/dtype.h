// Element types of checkpoints and activations, and their exact conversions:
// bf16, fp16, fp8 e4m3fn / e5m2 (OCP FP8, as torch.float8_e4m3fn / float8_e5m2), e2m1 (NVFP4 values).
// Rounding is round-to-nearest-even everywhere; overflow behaviour is explicit (Overflow).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace pg {

enum class DType : uint8_t {
  kF64, kF32, kF16, kBF16,
  kF8E4M3,  // float8_e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448
  kF8E5M2,  // float8_e5m2: bias 15, IEEE-like inf/NaN, max 57344
  kE2M1,    // fp4 e2m1 (NVFP4 values): bias 1, no inf/NaN, values ±{0,.5,1,1.5,2,3,4,6}; 2 per byte
  kI64, kI32, kI16, kI8, kU8, kBool,
};

std::string_view dtype_name(DType t);  // "bf16", "f8_e4m3", ...
// Safetensors header names: "F32", "BF16", "F8_E4M3", "F8_E5M2", "I64", "U8", "BOOL", ...
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view dtype_safetensors_name(DType t);
int dtype_bits(DType t);  // 4 for e2m1, 8 for fp8, ...
bool dtype_is_float(DType t);

// What a conversion does with a finite value beyond the target's largest finite value
// (and with ±inf when the target has no inf).
enum class Overflow {
  kSaturate,   // clamp to ±max finite (quantizers; CUDA's __NV_SATFINITE)
  kInfOrNaN,   // ±inf where the format has inf, else NaN (what torch's .to() does)
};

// ---- bit-level fast paths (hot loops) ---------------------------------------------------
inline float bits_to_f32(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }
// Round-to-nearest-even; NaN stays NaN (quiet), inf stays inf. Overflow rounds to inf as IEEE.
inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x0040u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // RNE, IEEE overflow to inf

float f8e4m3_to_f32(uint8_t v);  // table lookup
const float* f8e4m3_table();     // that table: [256] f32 by code, for vector code
float f8e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f, Overflow ov = Overflow::kInfOrNaN);
uint8_t f32_to_f8e5m2(float f, Overflow ov = Overflow::kInfOrNaN);

// The 16 e2m1 values by code (bit 3 the sign): e2m1_to_f32's table, for vector lookups.
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
float e2m1_to_f32(uint8_t nibble);  // low 4 bits used
// e2m1 has no inf/NaN: out-of-range and ±inf saturate to ±6; NaN maps to +6 (quantizers never
// produce it: a NaN input is a checked error upstream).
uint8_t f32_to_e2m1(float f);

// ---- the generic minifloat definition (reference for tests and slow paths) ---------------
struct MiniFloatSpec {
  int exp_bits;
  int man_bits;
  int bias;
  enum class Special { kIeee, kFnNaNOnly, kNone } special;
  // Largest finite value, as a double.
  double max_finite() const;
};
extern const MiniFloatSpec kSpecF16, kSpecBF16, kSpecE4M3, kSpecE5M2, kSpecE2M1;

double minifloat_decode(const MiniFloatSpec& s, uint32_t code);
uint32_t minifloat_encode(const MiniFloatSpec& s, float x, Overflow ov);

}  // namespace pg
