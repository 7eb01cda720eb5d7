// Small file helpers for formats/: read a whole text file, write a file atomically.
// They return Status (never throw) and name the path in every message.
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "core/status.h"

namespace pg {

// Whole file as bytes; NotFound when it does not exist, IoError otherwise.
Result<std::string> read_file_to_string(const std::filesystem::path& path);

// Writes `parts` back to back into `path` through a temporary file in the same directory,
// fsync, then rename: readers see the old file or the complete new one, never a partial one.
Status write_file_atomic(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts);

}  // namespace pg
