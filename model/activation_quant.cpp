#include "model/activation_quant.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace pg {

void round_rows_e4m3(const float* x, int64_t m, int64_t k, int64_t x_stride, float* out) {
  const int64_t xs = x_stride ? x_stride : k;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * xs;
    float* o = out + r * k;
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(xr[c]));
    if (amax == 0.0f || !std::isfinite(amax)) {
      std::copy(xr, xr + k, o);
      continue;
    }
    const float inv = 448.0f / amax, scale = amax / 448.0f;
    for (int64_t c = 0; c < k; ++c) o[c] = f8e4m3_to_f32(f32_to_f8e4m3(xr[c] * inv, Overflow::kSaturate)) * scale;
  }
}

}  // namespace pg
