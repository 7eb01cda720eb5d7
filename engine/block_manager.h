// BlockManager: the free list of fixed-size KV-cache blocks and the block tables built from it.
// A sequence owns the blocks listed in its table; position p lives in block table[p / block_size].
#pragma once

#include <cstdint>
#include <vector>

namespace pg {

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_free() const { return int64_t(free_.size()); }
  int64_t n_used() const { return n_blocks_ - n_free(); }
  double usage() const { return n_blocks_ ? double(n_used()) / double(n_blocks_) : 0.0; }

  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // Blocks `table` still needs to hold n_tokens positions.
  int64_t missing(const std::vector<int32_t>& table, int64_t n_tokens) const;
  // Grows `table` to hold n_tokens positions; false (and no change) when too few blocks are free.
  bool ensure(std::vector<int32_t>& table, int64_t n_tokens);
  // Returns every block of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

 private:
  int64_t n_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace pg
