// BlockManager implementation (the pool and the prefix cache: block_manager.h).
#include "engine/block_manager.h"

#include <algorithm>

#include "core/check.h"

namespace pg {
namespace {

// splitmix64's finalizer: every input bit moves every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching, int64_t lookahead)
    : n_blocks_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching), lookahead_(lookahead) {
  PG_CHECK(n_blocks > 0 && block_size > 0, "n_blocks={} block_size={}", n_blocks, block_size);
  PG_CHECK(lookahead >= 0 && lookahead <= block_size, "lookahead={}", lookahead);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // hand out 0, 1, 2, ... first
  refs_.assign(size_t(n_blocks), 0);
  if (prefix_caching_) {
    key_.assign(size_t(n_blocks), 0);
    published_.assign(size_t(n_blocks), false);
    tokens_.assign(size_t(n_blocks * (block_size + lookahead)), 0);
    lru_pos_.resize(size_t(n_blocks));
  }
}

int64_t BlockManager::missing(const std::vector<int32_t>& table, int64_t n_tokens) const {
  return std::max<int64_t>(0, blocks_for(n_tokens) - int64_t(table.size()));
}

int32_t BlockManager::take() {
  if (!free_.empty()) {
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  const int32_t b = lru_.front();  // evict the least recently released published block
  lru_.pop_front();
  cached_.erase(key_[size_t(b)]);
  published_[size_t(b)] = false;
  return b;
}

bool BlockManager::ensure(std::vector<int32_t>& table, int64_t n_tokens) {
  const int64_t need = missing(table, n_tokens);
  if (need > n_free()) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = take();
    refs_[size_t(b)] = 1;
    table.push_back(b);
  }
  return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    PG_CHECK(refs_[size_t(b)] > 0, "double free of KV block {}", b);
    if (--refs_[size_t(b)] > 0) continue;
    if (prefix_caching_ && published_[size_t(b)])
      lru_pos_[size_t(b)] = lru_.insert(lru_.end(), b);
    else
      free_.push_back(b);
  }
  table.clear();
}

uint64_t BlockManager::key_of(const std::vector<int32_t>& tokens, int64_t b, std::vector<uint64_t>& hashes) const {
  // hashes[i]: the chain over tokens [0, (i + 1) x block_size); a key adds the lookahead tokens.
  while (int64_t(hashes.size()) <= b) {
    const int64_t i = int64_t(hashes.size());
    uint64_t h = i == 0 ? 0x5065726567726e65ull : hashes.back();
    for (int64_t p = i * block_size_; p < (i + 1) * block_size_; ++p) h = mix(h ^ uint64_t(uint32_t(tokens[size_t(p)])));
    hashes.push_back(h);
  }
  uint64_t k = hashes[size_t(b)];
  for (int64_t p = (b + 1) * block_size_; p < (b + 1) * block_size_ + lookahead_; ++p)
    k = mix(k ^ (uint64_t(uint32_t(tokens[size_t(p)])) | (uint64_t(1) << 40)));
  return k;
}

bool BlockManager::holds(int32_t block, const std::vector<int32_t>& tokens, int64_t b) const {
  const int64_t w = block_size_ + lookahead_;
  return std::equal(tokens.begin() + b * block_size_, tokens.begin() + b * block_size_ + w,
                    tokens_.begin() + int64_t(block) * w);
}

int64_t BlockManager::match(const std::vector<int32_t>& tokens, int64_t max_tokens, std::vector<int32_t>& table,
                            std::vector<uint64_t>& hashes) {
  PG_CHECK(table.empty(), "prefix match into a table that holds blocks");
  if (!prefix_caching_) return 0;
  max_tokens = std::min<int64_t>(max_tokens, int64_t(tokens.size()));
  for (int64_t b = 0; (b + 1) * block_size_ + lookahead_ <= max_tokens; ++b) {
    const auto it = cached_.find(key_of(tokens, b, hashes));
    if (it == cached_.end() || !holds(it->second, tokens, b)) break;
    const int32_t blk = it->second;
    if (refs_[size_t(blk)]++ == 0) lru_.erase(lru_pos_[size_t(blk)]);
    table.push_back(blk);
  }
  return int64_t(table.size()) * block_size_;
}

void BlockManager::publish(const std::vector<int32_t>& tokens, int64_t n_ready, const std::vector<int32_t>& table,
                           std::vector<uint64_t>& hashes, int64_t& checked) {
  if (!prefix_caching_) return;
  n_ready = std::min<int64_t>(n_ready, int64_t(tokens.size()));
  const int64_t w = block_size_ + lookahead_;
  for (int64_t& b = checked; b < int64_t(table.size()) && (b + 1) * block_size_ + lookahead_ <= n_ready; ++b) {
    const int32_t blk = table[size_t(b)];
    if (published_[size_t(blk)]) continue;  // this table's block, published before (or matched)
    const uint64_t k = key_of(tokens, b, hashes);
    if (!cached_.emplace(k, blk).second) continue;  // the same content is cached in another block
    key_[size_t(blk)] = k;
    published_[size_t(blk)] = true;
    std::copy(tokens.begin() + b * block_size_, tokens.begin() + b * block_size_ + w, tokens_.begin() + int64_t(blk) * w);
  }
}

}  // namespace pg
