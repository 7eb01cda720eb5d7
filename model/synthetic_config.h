// The shapes `peregrine bench --synthetic NAME` builds (../shared/benchmarks.md), from each
// model's published config.json; `layers` > 0 keeps a slice of the first layers (dense ones
// first, and at least one MoE layer when the model has experts).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"

namespace pg {

std::vector<std::string> synthetic_model_names();
Result<ModelConfig> synthetic_model_config(std::string_view name, int64_t layers = 0);

}  // namespace pg
