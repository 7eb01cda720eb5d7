// KvCache: the paged latent KV cache of MLA. Per layer and token it holds only
// [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)] (576 values for DeepSeek-V3), in fixed-size
// blocks addressed through each sequence's block table: f32, or bf16 (each value rounded to
// nearest even as it is written: half the memory; the CUDA runner's --kv-cache-dtype bf16).
#pragma once

#include <cstdint>
#include <vector>

namespace pg {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t row_dim, bool bf16 = false)
      : n_layers_(n_layers), n_blocks_(n_blocks), block_size_(block_size), row_dim_(row_dim) {
    const size_t n = size_t(n_layers * n_blocks * block_size * row_dim);
    if (bf16) data16_.assign(n, 0);
    else data_.assign(n, 0.0f);
  }

  int64_t n_layers() const { return n_layers_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t row_dim() const { return row_dim_; }
  bool bf16() const { return data_.empty() && !data16_.empty(); }
  // One layer's pool: [n_blocks, block_size, row_dim], f32 (layer) or bf16 (layer16): the other
  // is null.
  float* layer(int64_t l) { return data_.empty() ? nullptr : data_.data() + l * layer_elems(); }
  const float* layer(int64_t l) const { return data_.empty() ? nullptr : data_.data() + l * layer_elems(); }
  uint16_t* layer16(int64_t l) { return data16_.empty() ? nullptr : data16_.data() + l * layer_elems(); }
  size_t n_bytes() const { return data_.size() * sizeof(float) + data16_.size() * sizeof(uint16_t); }

 private:
  int64_t layer_elems() const { return n_blocks_ * block_size_ * row_dim_; }
  int64_t n_layers_, n_blocks_, block_size_, row_dim_;
  std::vector<float> data_;
  std::vector<uint16_t> data16_;
};

}  // namespace pg
