// The index arithmetic of the CUDA MoE "direct multi" path (m = 2..8 without the plan kernel:
// warp_routing, slot_expert, the direct multi branches of moe_gate_up_kernel and
// moe_down_multi_kernel in ops/cuda/moe_experts/kernel.cu), emulated lane by lane on the host with
// the real launch heuristics of ops/cuda/moe_experts/config.h: every index of x, h, the weight
// stacks, expert_weight, the shared-memory partials and y stays in range, every h row down reads
// is written exactly once by gate_up, every partial the combine reads is written exactly once, the
// combine adds each token's terms in the contract's order (routed by ascending id, equal ids by
// slot, then shared), and every y element is written once, at the test shapes of
// tests/ops/moe_experts_test.cpp, the golden models' and with repeated, duplicate and dropped ids.
// A CPU test: it checks the arithmetic, not the device (the H200 bug of 2026-12-01 was a
// *_sync intrinsic skipped by some lanes, which only the GPU tests can show). Keep it in step
// with kernel.cu (and nvfp4_kernel.cu's moe_down_multi_nvfp4_kernel).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "ops/cuda/moe_experts/config.h"

namespace pg::ops::cuda {
namespace {

constexpr int kLanes = 32;

struct Shape {
  int m, hidden, inter, n_experts, top_k, n_shared;
  LinearWeight f;
  bool vec;
};

// Routed pair i's id as routed_id reads it: -1 past the pairs or outside [0, n_experts).
int routed_id(const Shape& s, const std::vector<int32_t>& idx, int i) {
  if (i >= s.m * s.top_k) return -1;
  const int e = idx[size_t(i)];
  return e >= 0 && e < s.n_experts ? e : -1;
}

// warp_routing: lane l holds pairs l and l + 32; bit i of `first` marks pair i when no lower flat
// index has its expert. Every lane takes part in each match (also lanes without a pair).
struct Routing {
  int e_lo[kLanes], e_hi[kLanes];
  uint64_t first = 0;
};
Routing warp_routing(const Shape& s, const std::vector<int32_t>& idx) {
  Routing w;
  uint32_t first_lo = 0, first_hi = 0;
  for (int l = 0; l < kLanes; ++l) w.e_lo[l] = routed_id(s, idx, l), w.e_hi[l] = -1;
  auto match_any = [](const int (&v)[kLanes], int l) {
    uint32_t mm = 0;
    for (int o = 0; o < kLanes; ++o) mm |= uint32_t(v[o] == v[l]) << o;
    return mm;
  };
  for (int l = 0; l < kLanes; ++l) {
    const uint32_t below = (1u << l) - 1u;
    if (w.e_lo[l] >= 0 && (match_any(w.e_lo, l) & below) == 0) first_lo |= 1u << l;
  }
  if (s.m * s.top_k > kLanes) {
    for (int l = 0; l < kLanes; ++l) w.e_hi[l] = routed_id(s, idx, kLanes + l);
    for (int l = 0; l < kLanes; ++l) {
      const uint32_t below = (1u << l) - 1u;
      bool f = w.e_hi[l] >= 0 && (match_any(w.e_hi, l) & below) == 0;
      for (int q = 0; q < kLanes; ++q)
        if (w.e_lo[q] == w.e_hi[l]) f = false;
      if (f) first_hi |= 1u << l;
    }
  }
  w.first = uint64_t(first_lo) | uint64_t(first_hi) << 32;
  return w;
}

int nth_set_bit(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) v &= v - 1;
  return v ? std::countr_zero(v) : -1;
}

int slot_expert(const Routing& w, int slot, uint64_t& pairs) {
  const int j = nth_set_bit(w.first, slot);
  EXPECT_GE(j, 0) << "slot " << slot << " past the distinct experts";
  if (j < 0) return -1;  // the kernel would read lane 31 and take expert -1 (out of the stack)
  const int e = j < kLanes ? w.e_lo[j] : w.e_hi[j - kLanes];
  uint32_t lo = 0, hi = 0;
  for (int l = 0; l < kLanes; ++l) lo |= uint32_t(w.e_lo[l] == e) << l, hi |= uint32_t(w.e_hi[l] == e) << l;
  pairs = uint64_t(lo) | uint64_t(hi) << 32;
  return e;
}

// Runs the emulation of one call; failures name the shape.
void check_call(const Shape& s, const std::vector<int32_t>& idx, const std::string& what) {
  SCOPED_TRACE(what + " m=" + std::to_string(s.m));
  ASSERT_TRUE(moe_direct_multi_fits(s.m, s.top_k, s.n_shared));
  const int n_routed = s.m * s.top_k, n_h = s.m * (s.top_k + s.n_shared), n_all = s.n_experts + s.n_shared;
  ASSERT_LE(n_routed, kMoeDirectMaxRouted);  // s_order, and the two pairs per lane
  const int max_active = std::min(s.n_experts, n_routed);
  const int groups = moe_down_multi_groups(max_active + s.n_shared);
  const int m_tile = moe_m_tile(s.m), k_m = s.vec ? m_tile : 1;
  const int k_e = s.vec ? linear_vec_elems(s.f) : 1;
  ASSERT_EQ(s.hidden % k_e, 0);
  ASSERT_EQ(s.inter % k_e, 0);
  const Routing w = warp_routing(s, idx);
  const int n_distinct = std::popcount(w.first);
  ASSERT_LE(n_distinct, max_active);  // gate_up's grid.y covers every distinct expert

  // The contract's view: each valid pair once, under its own expert.
  std::vector<int> pair_owner(size_t(n_routed), -1);

  // gate_up: grid x = inter tiles of kMoeWarps x rows, y = max_active + n_shared, z = splits.
  {
    const MoeTile t = moe_gate_up_tile(s.f, s.vec, k_m);
    ASSERT_LE(k_m * t.rows, kLanes);
    const int64_t rows_per_block = int64_t(kMoeWarps) * t.rows;
    const int64_t bx = (s.inter + rows_per_block - 1) / rows_per_block;
    ASSERT_GE(bx * rows_per_block, s.inter);  // every h column j has a warp
    const int gz = moe_gate_up_splits(s.m);
    std::vector<int> h_rows_written(size_t(n_h), 0);  // per h row, over one column tile
    for (int slot = 0; slot < max_active + s.n_shared; ++slot) {
      const bool shared = slot >= max_active;
      int64_t expert;
      int lo = 0, hi;
      int64_t h_base = 0;
      uint64_t pairs = 0;
      if (!shared) {
        if (slot >= n_distinct) continue;  // the block exits
        expert = slot_expert(w, slot, pairs);
        hi = std::popcount(pairs);
        for (uint64_t b = pairs; b; b &= b - 1) {
          const int i = std::countr_zero(b);
          ASSERT_LT(i, n_routed);
          EXPECT_EQ(pair_owner[size_t(i)], -1) << "pair " << i << " in two slots";
          pair_owner[size_t(i)] = int(expert);
        }
      } else {
        const int sh = slot - max_active;
        expert = s.n_experts + sh;
        hi = s.m;
        h_base = int64_t(s.m) * s.top_k + int64_t(sh) * s.m;
      }
      ASSERT_GE(expert, 0);
      ASSERT_LT(expert, n_all);  // gate/up rows expert * 2 inter + [0, 2 inter) of the stack
      for (int bz = 0; bz < gz; ++bz)
        for (int q = lo + bz * k_m; q < hi; q += gz * k_m) {
          const int m_valid = std::min(k_m, hi - q);
          for (int i = 0; i < k_m; ++i) {  // x rows
            const int pi = q + std::min(i, m_valid - 1);
            const int64_t token = shared ? pi : nth_set_bit(pairs, pi) / s.top_k;
            ASSERT_GE(token, 0);
            ASSERT_LT(token, s.m);
          }
          for (int i = 0; i < m_valid; ++i) {  // h rows (lane i * rows + r writes column j0 + r)
            const int64_t h_row = shared ? h_base + q + i : nth_set_bit(pairs, q + i);
            ASSERT_GE(h_row, 0);
            ASSERT_LT(h_row, n_h);
            ++h_rows_written[size_t(h_row)];
          }
        }
    }
    for (int r = 0; r < n_h; ++r) {
      const bool read = r >= n_routed || routed_id(s, idx, r) >= 0;
      EXPECT_EQ(h_rows_written[size_t(r)], read ? 1 : 0) << "h row " << r;
    }
    for (int i = 0; i < n_routed; ++i)
      EXPECT_EQ(pair_owner[size_t(i)], routed_id(s, idx, i)) << "pair " << i << " under the wrong expert";
  }

  // down: grid x = hidden tiles of groups x rows; dynamic smem groups x n_h x rows floats.
  {
    const MoeTile t = moe_down_multi_tile(s.f, s.vec, k_m);
    ASSERT_LE(t.rows, kLanes);
    const int64_t rows_per_block = int64_t(groups) * t.rows;
    const int64_t gx = (s.hidden + rows_per_block - 1) / rows_per_block;
    const size_t smem_floats = size_t(groups) * size_t(n_h) * size_t(t.rows);
    EXPECT_LE(smem_floats * sizeof(float), size_t(48) * 1024);  // no opt-in attribute is set
    std::vector<int> y_written(size_t(s.m) * size_t(s.hidden), 0);
    // Every block does the same (slot, g) tasks; the rows differ. Emulate block 0 and the last.
    std::vector<int64_t> blocks = {0};
    if (gx > 1) blocks.push_back(gx - 1);
    for (int64_t b : blocks) {
      std::vector<int> part_written(smem_floats, 0);
      const int n_tasks = (n_distinct + s.n_shared) * groups;
      for (int warp = 0; warp < kMoeWarps; ++warp)
        for (int task = warp; task < n_tasks; task += kMoeWarps) {
          const int slot = task / groups, g = task % groups;
          const bool shared = slot >= n_distinct;
          int64_t expert;
          uint64_t rest = 0;
          int n_pairs, h_base = 0;
          if (!shared) {
            expert = slot_expert(w, slot, rest);
            n_pairs = std::popcount(rest);
          } else {
            expert = s.n_experts + (slot - n_distinct);
            n_pairs = s.m;
            h_base = n_routed + (slot - n_distinct) * s.m;
          }
          ASSERT_GE(expert, 0);
          ASSERT_LT(expert, n_all);  // down rows expert * hidden + min(row, hidden - 1)
          for (int q = 0; q < n_pairs; q += k_m) {
            const int m_valid = std::min(k_m, n_pairs - q);
            std::vector<int> hrow(static_cast<size_t>(k_m));
            for (int i = 0; i < k_m; ++i) {
              if (shared) {
                hrow[size_t(i)] = h_base + q + std::min(i, m_valid - 1);
              } else if (i == 0 || i < m_valid) {
                hrow[size_t(i)] = rest ? std::countr_zero(rest) : -1;
                rest &= rest - 1;
              } else {
                hrow[size_t(i)] = hrow[size_t(i - 1)];
              }
              ASSERT_GE(hrow[size_t(i)], 0);
              ASSERT_LT(hrow[size_t(i)], n_h);
            }
            for (int i = 0; i < m_valid; ++i) {
              if (!shared) {
                ASSERT_LT(hrow[size_t(i)], n_routed);  // expert_weight index
              }
              for (int lane = 0; lane < t.rows; ++lane) {
                const size_t at = size_t((g * n_h + hrow[size_t(i)]) * t.rows + lane);
                ASSERT_LT(at, smem_floats);
                ++part_written[at];
              }
            }
          }
        }
      // s_order: token t's routed pairs in summing order (-1: dropped).
      std::vector<int> order(size_t(n_routed), -2);
      for (int i = 0; i < n_routed; ++i) {
        const int k0 = i / s.top_k * s.top_k, e = routed_id(s, idx, i);
        int rank = 0;
        for (int k = 0; k < s.top_k; ++k) {
          const int f = routed_id(s, idx, k0 + k);
          rank += f < e || (f == e && k0 + k < i);
        }
        ASSERT_LT(k0 + rank, kMoeDirectMaxRouted);
        EXPECT_EQ(order[size_t(k0 + rank)], -2) << "two pairs of a token at one rank";
        order[size_t(k0 + rank)] = e >= 0 ? i : -1;
      }
      for (int tok = 0; tok < s.m; ++tok) {  // the contract's order: by (id, slot), dropped ones skipped
        std::vector<int> want;
        for (int k = 0; k < s.top_k; ++k)
          if (routed_id(s, idx, tok * s.top_k + k) >= 0) want.push_back(tok * s.top_k + k);
        std::stable_sort(want.begin(), want.end(),
                         [&](int a, int c) { return routed_id(s, idx, a) < routed_id(s, idx, c); });
        std::vector<int> got;
        for (int k = 0; k < s.top_k; ++k)
          if (order[size_t(tok * s.top_k + k)] >= 0) got.push_back(order[size_t(tok * s.top_k + k)]);
        EXPECT_EQ(got, want) << "token " << tok;
      }
      for (int i = 0; i < groups * t.rows * s.m; ++i) {
        const int tok = i / (groups * t.rows), g = i % (groups * t.rows) / t.rows, r = i % t.rows;
        const int64_t row = (b * groups + g) * t.rows + r;
        if (row >= s.hidden) continue;
        const size_t base = size_t(g) * size_t(n_h) * size_t(t.rows) + size_t(r);
        for (int k = 0; k < s.top_k; ++k) {
          const int j = order[size_t(tok * s.top_k + k)];
          ASSERT_NE(j, -2);
          if (j >= 0) {
            ASSERT_LT(base + size_t(j * t.rows), smem_floats);
            EXPECT_EQ(part_written[base + size_t(j * t.rows)], 1) << "routed term of token " << tok;
          }
        }
        for (int sh = 0; sh < s.n_shared; ++sh) {
          const size_t at = base + size_t((n_routed + sh * s.m + tok) * t.rows);
          ASSERT_LT(at, smem_floats);
          EXPECT_EQ(part_written[at], 1) << "shared term of token " << tok;
        }
        ++y_written[size_t(tok) * size_t(s.hidden) + size_t(row)];
      }
    }
    // Blocks 0 and gx - 1 write their rows once; the blocks between are block 0 shifted.
    for (int tok = 0; tok < s.m; ++tok)
      for (int64_t row = 0; row < s.hidden; ++row) {
        const int64_t blk = row / rows_per_block;
        if (blk == 0 || blk == gx - 1) {
          EXPECT_EQ(y_written[size_t(tok) * size_t(s.hidden) + size_t(row)], 1) << "y row " << row;
        }
      }
  }
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Ids { kRandom, kSame, kDuplicates, kDropped };

std::vector<int32_t> route(const Shape& s, Ids kind, uint64_t seed) {
  std::vector<int32_t> idx(size_t(s.m * s.top_k));
  std::vector<int32_t> perm(size_t(std::max(s.n_experts, 1)));
  for (int t = 0; t < s.m; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int k = 0; k < s.top_k; ++k) {  // top_k distinct experts per token
      const int j = k + int(mix(seed + uint64_t(t * 977 + k)) % uint64_t(s.n_experts - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      int32_t e = perm[size_t(k)];
      if (kind == Ids::kSame) e = (3 + 7 * k) % s.n_experts;
      if (kind == Ids::kDuplicates && k == 1) e = idx[size_t(t * s.top_k)];
      if (kind == Ids::kDropped && k == 0) e = -1;
      if (kind == Ids::kDropped && k == s.top_k - 1 && t % 2) e = s.n_experts + 3;
      idx[size_t(t * s.top_k + k)] = e;
    }
  }
  return idx;
}

struct Case {
  const char* name;
  LinearWeight f;
  int n_experts, n_shared, top_k, hidden, inter;
};

TEST(MoeDirectMultiIndex, EveryIndexInRangeAndEveryTermOnce) {
  using enum LinearWeight;
  const Case cases[] = {
      {"moonlight_bf16", kBF16, 64, 2, 6, 2048, 1408},      {"moonlight_fp8", kFp8Block, 64, 2, 6, 2048, 1408},
      {"moonlight_f32", kF32, 64, 2, 6, 2048, 1408},        {"moonlight_dense", kBF16, 0, 1, 0, 2048, 11264},
      {"v3_fp8", kFp8Block, 256, 1, 8, 7168, 2048},         {"v3_bf16", kBF16, 256, 1, 8, 7168, 2048},
      {"tiny", kBF16, 8, 2, 3, 52, 22},                     {"tiny_f32", kF32, 8, 2, 3, 52, 22},
      {"tiny_fp8_8x8", kFp8Block, 8, 1, 2, 40, 24},         {"tiny_shared_only", kBF16, 8, 2, 0, 52, 22},
      {"tiny_routed_only", kBF16, 8, 0, 3, 52, 22},         {"tiny_dense", kBF16, 0, 1, 0, 52, 22},
      {"golden_v3_tiny", kBF16, 8, 1, 3, 64, 32},           {"golden_v2_lite_tiny", kBF16, 8, 2, 3, 64, 32},
      {"golden_v3_odd_dims", kBF16, 9, 1, 2, 52, 22},       {"small_fp8_32", kFp8Block, 16, 1, 4, 160, 96},
      {"mid_f32", kF32, 16, 1, 4, 256, 128},
  };
  for (const Case& c : cases)
    for (int m = 2; m <= kMoeDirectMaxTokens; ++m) {
      if (!moe_direct_multi_fits(m, c.top_k, c.n_shared)) continue;
      for (bool vec : {true, false}) {
        const int ve = linear_vec_elems(c.f);
        if (vec && (c.hidden % ve || c.inter % ve)) continue;
        const Shape s{m, c.hidden, c.inter, c.n_experts, c.top_k, c.n_shared, c.f, vec};
        for (Ids kind : {Ids::kRandom, Ids::kSame, Ids::kDuplicates, Ids::kDropped}) {
          if (c.top_k == 0 && kind != Ids::kRandom) continue;
          for (uint64_t seed = 1; seed <= 3; ++seed)
            check_call(s, route(s, kind, seed * 7919 + uint64_t(m)),
                       std::string(c.name) + (vec ? " vec" : " scalar") + " ids " + std::to_string(int(kind)));
        }
      }
    }
}

// moe_down_multi_nvfp4_kernel (ops/cuda/moe_experts/nvfp4_kernel.cu): tasks (slot, K slice) over
// the block's kMoeDirectMaxSlots warps, partials at s_part[kpart * n_h + h row] (a static
// [kMoeDirectMaxHRows][16] array), K slices as the m = 1 kernel cuts them; every partial the
// combine reads is written exactly once, and a slice's steps are the m = 1 kernel's.
TEST(MoeDirectMultiIndex, Nvfp4DownPartialsInRangeAndOnce) {
  const Case cases[] = {
      {"moonlight", LinearWeight::kNvfp4, 64, 2, 6, 2048, 1408}, {"moonlight_dense", LinearWeight::kNvfp4, 0, 1, 0, 2048, 11264},
      {"v3", LinearWeight::kNvfp4, 256, 1, 8, 7168, 2048},       {"tiny", LinearWeight::kNvfp4, 8, 2, 3, 64, 32},
      {"shared_only", LinearWeight::kNvfp4, 8, 2, 0, 64, 32},    {"routed_only", LinearWeight::kNvfp4, 8, 0, 3, 64, 32},
  };
  for (const Case& c : cases)
    for (int m = 2; m <= kMoeDirectMaxTokens; ++m) {
      if (!moe_direct_multi_fits(m, c.top_k, c.n_shared)) continue;
      const Shape s{m, c.hidden, c.inter, c.n_experts, c.top_k, c.n_shared, c.f, true};
      for (Ids kind : {Ids::kRandom, Ids::kSame, Ids::kDuplicates, Ids::kDropped}) {
        if (c.top_k == 0 && kind != Ids::kRandom) continue;
        const std::vector<int32_t> idx = route(s, kind, 31 * uint64_t(m) + uint64_t(kind));
        const std::string what = std::string(c.name) + " m " + std::to_string(m) + " ids " + std::to_string(int(kind));
        const int n_routed = m * c.top_k, n_h = m * (c.top_k + c.n_shared);
        const int k_split = moe_nvfp4_down_direct_split(c.top_k + c.n_shared);
        ASSERT_LE(k_split * n_h, kMoeDirectMaxHRows) << what;
        const Routing w = warp_routing(s, idx);
        const int n_distinct = std::popcount(w.first);
        const int64_t k_steps = (c.inter / 32 + 3) / 4, per_part = (k_steps + k_split - 1) / k_split;
        std::vector<int> written(size_t(k_split * n_h), 0);
        std::vector<int64_t> steps_of_row(size_t(n_h), 0);
        const int n_tasks = (n_distinct + c.n_shared) * k_split;
        for (int task = 0; task < n_tasks; ++task) {  // warp task % 16 takes it; the order is irrelevant here
          const int slot = task / k_split, kpart = task % k_split;
          const bool shared = slot >= n_distinct;
          uint64_t pairs = 0;
          int n_pairs, h_base = 0;
          if (!shared) {
            const int e = slot_expert(w, slot, pairs);
            ASSERT_GE(e, 0) << what;
            n_pairs = std::popcount(pairs);
          } else {
            n_pairs = m, h_base = n_routed + (slot - n_distinct) * m;
          }
          const int64_t s0 = std::min(k_steps, kpart * per_part), s1 = std::min(k_steps, s0 + per_part);
          for (int q = 0; q < n_pairs; q += 8)
            for (int col = 0; col < std::min(8, n_pairs - q); ++col) {
              const int hr = shared ? h_base + q + col : nth_set_bit(pairs, q + col);
              ASSERT_GE(hr, 0) << what;
              ASSERT_LT(hr, n_h) << what;
              if (!shared) {
                ASSERT_LT(hr, n_routed) << what;  // expert_weight index
              }
              ++written[size_t(kpart * n_h + hr)];
              steps_of_row[size_t(hr)] += s1 - s0;
            }
        }
        for (int hr = 0; hr < n_h; ++hr) {
          const bool read = hr >= n_routed || routed_id(s, idx, hr) >= 0;
          for (int kp = 0; kp < k_split; ++kp)
            EXPECT_EQ(written[size_t(kp * n_h + hr)], read ? 1 : 0) << what << " h row " << hr << " slice " << kp;
          if (read) {
            EXPECT_EQ(steps_of_row[size_t(hr)], k_steps) << what << " h row " << hr << ": K covered once";
          }
        }
      }
    }
}

// moe_direct_multi_fits keeps every pair in the two lanes' slots and the h rows of a down block.
TEST(MoeDirectMultiIndex, FitsBounds) {
  EXPECT_TRUE(moe_direct_multi_fits(8, 8, 1));    // V3: 64 routed pairs, 72 h rows
  EXPECT_FALSE(moe_direct_multi_fits(8, 9, 0));   // 72 routed pairs > 2 per lane
  EXPECT_FALSE(moe_direct_multi_fits(9, 1, 0));   // m past kMoeDirectMaxTokens
  EXPECT_FALSE(moe_direct_multi_fits(2, 0, 0));   // no expert at all
  EXPECT_FALSE(moe_direct_multi_fits(8, 2, 15));  // 136 h rows
  for (int m = 1; m <= kMoeDirectMaxTokens; ++m)
    for (int k = 0; k <= 16; ++k)
      for (int sh = 0; sh <= 4; ++sh)
        if (moe_direct_multi_fits(m, k, sh)) {
          EXPECT_LE(m * k, kMoeDirectMaxRouted);
          EXPECT_LE(m * (k + sh), kMoeDirectMaxHRows);
        }
}

}  // namespace
}  // namespace pg::ops::cuda
