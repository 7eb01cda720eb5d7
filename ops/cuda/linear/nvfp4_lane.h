// A lane's copy or load sources and ring slots in the NVFP4 stage loops (linear/nvfp4_mma.cuh's ring,
// register and per-lane streams, linear_nvfp4_x1_kernel, moe_experts/nvfp4_kernel.cu's downs): the
// arithmetic only, no CUDA headers, so that the host test (tests/unit/ops/nvfp4_lane_test.cpp) runs
// this very code against the chunk-indexed copies and loads it replaced (chunk 4 s + t of each row,
// clamped to the row's last chunk and zero past K; its scale bytes; no step at or past s1).
//
// Why: a stage used to rebuild each row's address from its chunk index (64-bit multiplies, the clamp
// at K, predicates and zero fills, sign extensions): a pass of the persistent linear kernel's loop
// took 225 SASS instructions a KB of codes where the unpack, the block scales and the mmas need ~128,
// the MoE gate_up's ring 168 (scripts/sass_loops.py; 156.5 and 151 with this). A lane now keeps one
// pointer and the rows' distances, one offset moves a stage at a time, and only a warp's last stage,
// when it is not whole, takes the clamped path.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PG_NVFP4_LANE_HD __host__ __device__ __forceinline__
#else
#define PG_NVFP4_LANE_HD inline
#endif

namespace pg::ops::cuda {

// Bytes of a 16-byte chunk (32 codes) and of a k-step's four chunks, and a k-step's scale bytes
// (8 blocks of 16 codes) in a row.
constexpr int kNvfp4LaneChunkBytes = 16;
constexpr int kNvfp4LaneStepBytes = 4 * kNvfp4LaneChunkBytes;
constexpr int kNvfp4LaneStepScaleBytes = 8;

// A lane's copy sources: chunk 4 s + t (t = lane % 4) of k-step s of row g + 8h of tile i, and the
// 4-byte word of that chunk pair's e4m3 scales (2 (c & ~1) bytes into the row's scales; with
// pair_word = false the chunk's own 2 scale bytes, 2 c bytes in, as the register path loads them),
// for s = s_at + off / kNvfp4LaneStepBytes. In few registers: row (i, h)'s codes are at w + d[i][h] + off
// and its scales at sc + (d[i][h] + off) / 8, d the row's distance in codes from row (0, 0): rows are
// K / 2 bytes of codes and K / 16 of scales (K % 16 == 0), so the distances are multiples of 8 in the
// same ratio; no row comes before row (0, 0) (the callers clamp rows past the matrix to its last),
// and a matrix's codes are < 4 GB.
template <int kTiles>
struct Nvfp4LaneSrc {
  const uint8_t* w;
  const uint8_t* sc;
  uint32_t d[kTiles][2];
  uint32_t off = 0;  // unsigned: a 64-bit address plus it needs no sign extension

  PG_NVFP4_LANE_HD void at(const uint8_t* const (&wrow)[kTiles][2], const uint8_t* const (&srow)[kTiles][2], int64_t s_at,
                           int t, bool pair_word = true) {
    w = wrow[0][0] + (s_at * 4 + t) * kNvfp4LaneChunkBytes;
    sc = srow[0][0] + s_at * kNvfp4LaneStepScaleBytes + 2 * (pair_word ? t & ~1 : t);
    for (int i = 0; i < kTiles; ++i)
      for (int h = 0; h < 2; ++h) d[i][h] = uint32_t(wrow[i][h] - wrow[0][0]);
    off = 0;
  }
  PG_NVFP4_LANE_HD const uint8_t* codes(int i, int h) const { return w + (d[i][h] + off); }
  PG_NVFP4_LANE_HD const uint8_t* scales(int i, int h) const { return sc + ((d[i][h] + off) >> 3); }
  // On to the next stage of `steps` k-steps.
  PG_NVFP4_LANE_HD void step(int steps) { off += uint32_t(steps * kNvfp4LaneStepBytes); }
};

// Copy u of a whole stage (every k-step below the warp's s1 and inside K): row (i, h)'s codes at
// src.codes(i, h) + u * kNvfp4LaneStepBytes, its scales at src.scales(i, h) + u * kNvfp4LaneStepScaleBytes.
//
// The warp's last stage when it is not whole, at k-step s: copy u exists while s + u < s1; its
// chunk c = 4 (s + u) + t reads as zero past k_chunks (ok = false), from the row's last chunk's
// address; offsets from src.codes / src.scales (src at k-step s, its scales as `pair_word` says).
// 32-bit indices: K / 32 < 2^31.
struct Nvfp4TailCopy {
  bool copy, ok;
  int codes, scales;
};
PG_NVFP4_LANE_HD Nvfp4TailCopy nvfp4_lane_tail_copy(int s, int u, int s1, int k_chunks, int t, bool pair_word = true) {
  const int c0 = s * 4 + t, c = c0 + 4 * u, last = k_chunks - 1, cc = c < last ? c : last;
  return {s + u < s1, c <= last, (cc - c0) * kNvfp4LaneChunkBytes,
          pair_word ? 2 * ((cc & ~1) - (c0 & ~1)) : 2 * (cc - c0)};
}

// The whole stages of a warp's k-steps [s0, s1) in stages of `unroll` (those first; at most its last
// stage is not whole): whole_steps, the caller knows K % 128 == 0 (every chunk of a step below s1
// is inside K).
PG_NVFP4_LANE_HD int nvfp4_lane_whole_stages(int s0, int s1, int k_chunks, int unroll, bool whole_steps) {
  const int end = whole_steps || s1 < k_chunks / 4 ? s1 : k_chunks / 4;
  return end > s0 ? (end - s0) / unroll : 0;
}

// Slot word (step u, tile i, row half h) of a lane's view of Nvfp4RingStage<kTiles, kUnroll>
// ({uint4 w[kUnroll][kTiles][2][32]; uint32_t sc[...same]}): its w[u][i][h][lane] and
// sc[u][i][h][lane] are this index past its words of w[0][0][0] and sc[0][0][0].
template <int kTiles>
PG_NVFP4_LANE_HD constexpr int nvfp4_slot_word(int u, int i, int h) {
  return ((u * kTiles + i) * 2 + h) * 32;
}

// A warp's ring of kStages slots of kBytes, as byte offsets: stage J is read from slot J % kStages
// (rd), and the copies issued while it is read, stage J + kStages - 1's, fill the slot stage J - 1
// was read from (wr): one group in flight per slot but the one being read.
template <int kStages, int kBytes>
struct Nvfp4SlotCursor {
  int rd = 0, wr = (kStages - 1) * kBytes;
  PG_NVFP4_LANE_HD void next() {
    wr = rd;
    rd = rd + kBytes == kStages * kBytes ? 0 : rd + kBytes;
  }
};

}  // namespace pg::ops::cuda
