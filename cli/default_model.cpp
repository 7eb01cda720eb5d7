// default_model_dir(): finds the embedded model folder.
#include "cli/default_model.h"

#include <cstdlib>
#include <system_error>
#include <vector>

namespace pg::cli {

Result<std::filesystem::path> default_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("PEREGRINE_MODEL"); env && *env) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "../models/peregrine-tiny");
    candidates.push_back(exe.parent_path() / "../share/peregrine/models/peregrine-tiny");
  }
  candidates.emplace_back(fs::path(PEREGRINE_SOURCE_DIR) / "models/peregrine-tiny");
  for (const fs::path& p : candidates)
    if (fs::exists(p / "config.json", ec)) return fs::weakly_canonical(p, ec);
  return not_found("no model folder given and the embedded model was not found (looked for "
                   "models/peregrine-tiny next to the binary and in {}); pass MODEL_DIR or set PEREGRINE_MODEL",
                   PEREGRINE_SOURCE_DIR);
}

}  // namespace pg::cli
