// KvCache: the paged latent KV cache of MLA. Per layer and token it holds only
// [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)] (576 floats for DeepSeek-V3), in fixed-size
// blocks addressed through each sequence's block table.
#pragma once

#include <cstdint>
#include <vector>

namespace pg {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t row_dim)
      : n_layers_(n_layers), n_blocks_(n_blocks), block_size_(block_size), row_dim_(row_dim),
        data_(size_t(n_layers * n_blocks * block_size * row_dim), 0.0f) {}

  int64_t n_layers() const { return n_layers_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t row_dim() const { return row_dim_; }
  // One layer's pool: [n_blocks, block_size, row_dim] f32.
  float* layer(int64_t l) { return data_.data() + l * n_blocks_ * block_size_ * row_dim_; }
  const float* layer(int64_t l) const { return data_.data() + l * n_blocks_ * block_size_ * row_dim_; }
  size_t n_bytes() const { return data_.size() * sizeof(float); }

 private:
  int64_t n_layers_, n_blocks_, block_size_, row_dim_;
  std::vector<float> data_;
};

}  // namespace pg
