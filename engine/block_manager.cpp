// BlockManager implementation.
#include "engine/block_manager.h"

#include "core/check.h"

namespace pg {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  PG_CHECK(n_blocks > 0 && block_size > 0, "n_blocks={} block_size={}", n_blocks, block_size);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // hand out 0, 1, 2, ... first
}

int64_t BlockManager::missing(const std::vector<int32_t>& table, int64_t n_tokens) const {
  return std::max<int64_t>(0, blocks_for(n_tokens) - int64_t(table.size()));
}

bool BlockManager::ensure(std::vector<int32_t>& table, int64_t n_tokens) {
  const int64_t need = missing(table, n_tokens);
  if (need > n_free()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  PG_CHECK(int64_t(free_.size()) <= n_blocks_, "double free of KV blocks");
  table.clear();
}

}  // namespace pg
