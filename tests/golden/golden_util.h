// Shared pieces of the golden tests (CPU and CUDA): the golden models, where their folders and
// expected outputs live, and a double-precision log-softmax.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace pg::golden {

// Random tiny models (tools/golden.py) and the embedded trained model (models/peregrine-tiny,
// whose expected outputs live in tests/golden/peregrine_tiny/).
inline const char* const kModels[] = {"v3_tiny", "v2_lite_tiny", "v3_odd_dims", "v3_tiny_fp8", "peregrine_tiny"};

inline std::filesystem::path model_dir(const std::string& name) {
  const auto root = std::filesystem::path(PG_SOURCE_DIR);
  if (name == "peregrine_tiny") return root / "models" / "peregrine-tiny";
  return root / "tests" / "golden" / name;
}

inline nlohmann::json load_expected(const std::string& name) {
  std::ifstream f(std::filesystem::path(PG_SOURCE_DIR) / "tests" / "golden" / name / "expected.json");
  return nlohmann::json::parse(f);
}

inline std::vector<double> log_softmax(const float* logits, int64_t n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - lse;
  return out;
}

}  // namespace pg::golden
