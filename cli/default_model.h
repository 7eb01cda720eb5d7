// Where the embedded model lives when no MODEL_DIR is given: $PEREGRINE_MODEL, else
// models/peregrine-tiny next to the executable's tree (build/ or bin/), else in the source tree
// this binary was built from.
#pragma once

#include <filesystem>

#include "core/status.h"

namespace pg::cli {

Result<std::filesystem::path> default_model_dir();

}  // namespace pg::cli
