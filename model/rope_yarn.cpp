// YaRN inverse frequencies and scales (see rope_yarn.h).
#include "model/rope_yarn.h"

#include <algorithm>
#include <cmath>

namespace pg {
namespace {
double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}
}  // namespace

ops::RopeTable make_rope_table(const ModelConfig& c) {
  ops::RopeTable t;
  t.interleave = c.rope_interleave;
  const int64_t dim = c.qk_rope_head_dim, half = dim / 2;
  const float base = float(c.rope_theta);
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) pos_freqs[i] = std::pow(base, float(2 * i) / float(dim));
  t.inv_freq.resize(static_cast<size_t>(half));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type != "yarn") {
    for (int64_t i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freqs[i];
    return t;
  }
  const double factor = rs.factor;
  auto correction_dim = [&](double n_rot) {
    return (double(dim) * std::log(double(rs.original_max_position_embeddings) / (n_rot * 2 * M_PI))) /
           (2 * std::log(double(c.rope_theta)));
  };
  double low = std::floor(correction_dim(rs.beta_fast)), high = std::ceil(correction_dim(rs.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // as the reference: avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float inv_extra = 1.0f / pos_freqs[i];
    const float inv_inter = 1.0f / (float(factor) * pos_freqs[i]);
    t.inv_freq[i] = inv_inter * (1.0f - extrapolation) + inv_extra * extrapolation;
  }
  // cos/sin scale: mscale/mscale_all_dim ratio when both are set, else the paper's default.
  if (rs.mscale != 0 && rs.mscale_all_dim != 0)
    t.attention_factor = float(yarn_get_mscale(factor, rs.mscale) / yarn_get_mscale(factor, rs.mscale_all_dim));
  else
    t.attention_factor = float(yarn_get_mscale(factor, 1.0));
  return t;
}

float mla_softmax_scale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(double(c.qk_head_dim()));
  if (c.rope_scaling.type == "yarn" && c.rope_scaling.mscale_all_dim != 0) {
    const double m = yarn_get_mscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    scale *= m * m;
  }
  return float(scale);
}

}  // namespace pg
