// Activations rounded the way a W4A8 kernel would take them: e4m3 with one f32 scale per token row.
// A CPU emulation for quality probes (`peregrine eval --activations e4m3`); no CUDA kernel takes
// e4m3 activations yet (docs/decode-status.md, "Open from session 27").
#pragma once

#include <cstdint>

namespace pg {

// out[r * k + c] = e4m3(x[r * x_stride + c] * (448 / amax_r)) * (amax_r / 448), amax_r = max |x| of
// row r (round to nearest even, saturating at +-448); a row of zeros stays zero, a non-finite amax
// leaves its row unchanged (nothing finite to scale to). x_stride 0 means k.
void round_rows_e4m3(const float* x, int64_t m, int64_t k, int64_t x_stride, float* out);

}  // namespace pg
