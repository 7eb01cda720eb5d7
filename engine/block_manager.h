// BlockManager: the pool of fixed-size KV-cache blocks and the block tables built from it. A
// sequence owns the blocks listed in its table; position p lives in block table[p / block_size].
//
// Prefix caching (on request): a full block whose KV is complete can be published under the
// tokens that determine it, so that a later sequence whose tokens start the same way takes it
// instead of recomputing it. A block's key is the chained hash of every token from position 0
// to its end plus `lookahead` tokens after it (1 when the cache also holds MTP KV: the MTP
// entry at a position depends on the token after it), and the block keeps those last
// block_size + lookahead tokens to check a match against (a false match needs a 64-bit collision
// of the chained hash and equal tokens). Blocks are reference-counted: a published block that no
// table lists any more stays cached and counts as free; it is evicted, least recently released
// first, only when no never-used or unpublished block is left. Published blocks are never written:
// sequences write only at positions >= their computed length, which a match never passes.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace pg {

class BlockManager {
 public:
  // lookahead: tokens after a block that its prefix-cache key covers (0 or 1); ignored without
  // prefix caching.
  BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching = false, int64_t lookahead = 0);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Blocks no table lists (cached ones included: they are taken when needed).
  int64_t n_free() const { return int64_t(free_.size() + lru_.size()); }
  int64_t n_used() const { return n_blocks_ - n_free(); }
  double usage() const { return n_blocks_ ? double(n_used()) / double(n_blocks_) : 0.0; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t lookahead() const { return prefix_caching_ ? lookahead_ : 0; }
  int64_t n_cached() const { return int64_t(cached_.size()); }  // published blocks, in use or not

  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // Blocks `table` still needs to hold n_tokens positions.
  int64_t missing(const std::vector<int32_t>& table, int64_t n_tokens) const;
  // Grows `table` to hold n_tokens positions; false (and no change) when too few blocks are free.
  bool ensure(std::vector<int32_t>& table, int64_t n_tokens);
  // Drops `table`'s hold on its blocks and clears it: unpublished blocks return to the pool,
  // published ones stay cached until evicted.
  void release(std::vector<int32_t>& table);

  // Prefix caching. `hashes` is the sequence's memo of its blocks' keys (valid while its tokens
  // keep their values), grown as needed.
  // Appends to the empty `table` the published blocks that hold the longest run of whole blocks
  // of `tokens` whose keys (block_size + lookahead tokens each) lie within the first max_tokens;
  // returns the number of positions they cover (0 without prefix caching).
  int64_t match(const std::vector<int32_t>& tokens, int64_t max_tokens, std::vector<int32_t>& table,
                std::vector<uint64_t>& hashes);
  // Publishes the full blocks of `table` whose KV is complete, i.e. whose key lies within the
  // first n_ready tokens (which must be final: computed, and for the lookahead, known), unless a
  // block of the same key is already published. `checked`: the table's leading blocks already
  // past this point (published or found published elsewhere), advanced here; 0 for a new table.
  void publish(const std::vector<int32_t>& tokens, int64_t n_ready, const std::vector<int32_t>& table,
               std::vector<uint64_t>& hashes, int64_t& checked);

 private:
  int32_t take();  // a block for a table: never-used first, else the least recently cached
  uint64_t key_of(const std::vector<int32_t>& tokens, int64_t b, std::vector<uint64_t>& hashes) const;
  bool holds(int32_t block, const std::vector<int32_t>& tokens, int64_t b) const;  // its stored tokens match

  int64_t n_blocks_, block_size_;
  bool prefix_caching_;
  int64_t lookahead_;
  std::vector<int32_t> free_;    // unpublished, unreferenced: a stack, the last freed reused first
  std::vector<int32_t> refs_;    // tables listing each block
  // Published blocks: key -> block, each block's key and tokens, and the unreferenced ones in
  // release order (front: the first to evict).
  std::unordered_map<uint64_t, int32_t> cached_;
  std::vector<uint64_t> key_;
  std::vector<bool> published_;
  std::vector<int32_t> tokens_;  // [n_blocks, block_size + lookahead]
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
};

}  // namespace pg
