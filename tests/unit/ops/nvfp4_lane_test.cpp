// The lane arithmetic of the NVFP4 m = 1 stage loops (ops/cuda/linear/nvfp4_lane.h), on the host: a warp's
// stages issued and read in the loops' order (nvfp4_mma_stream_ring, linear_nvfp4_x1_kernel's units, the
// MoE downs), every copy's source taken from the header's own functions and checked against what the
// chunk-indexed ring they replaced copied (chunk c = 4 s + t of each row, clamped to the row's last chunk
// and read as zero past K; the scale word 2 (c & ~1) bytes in; no step at or past s1), every slot read
// holding the stage being read; and the register path's loads (nvfp4_mma_stream_staged_regs) against the
// chunk-indexed loads they replaced. Shapes: the models' K (576 .. 18432) and K % 128 != 0, K slices that
// leave a short last stage, 1-2 tiles, 1-4 steps a stage, 2-4 slots, several units. A CPU test of the
// arithmetic; the GPU op tests (LinearCuda, MoeExpertsCuda, the goldens) check the kernels that use it.
#include "ops/cuda/linear/nvfp4_lane.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pg::ops::cuda {
namespace {

struct Copy {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  bool ok = false;
  int stage = -1;  // the stage that wrote it
};

struct Case {
  int k;                   // K: k / 32 chunks a row
  int s0, s1;              // the warp's k-steps
  int units;               // row groups in turn (the persistent linear kernel), else 1
  bool whole_steps;        // the caller knows K % 128 == 0 (the MoE gate_up)
};

// Rows (i, h) of unit `unit` for lane group g: as the linear kernels pick them (row0 + 16 i + g + 8 h,
// clamped to the matrix), rows `rows` K / 2 bytes apart; unit u's row0 = 32 u * kTiles.
template <int kTiles>
void unit_rows(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales, int k, int n_rows, int unit, int g,
               const uint8_t* (&wrow)[kTiles][2], const uint8_t* (&srow)[kTiles][2]) {
  for (int i = 0; i < kTiles; ++i)
    for (int h = 0; h < 2; ++h) {
      const int row = std::min(unit * 16 * kTiles + 16 * i + g + 8 * h, n_rows - 1);
      wrow[i][h] = codes.data() + size_t(row) * size_t(k / 2);
      srow[i][h] = scales.data() + size_t(row) * size_t(k / 16);
    }
}

template <int kTiles, int kUnroll, int kStages>
void run(const Case& c) {
  const int k_chunks = c.k / 32;
  const int n_rows = c.units * 16 * kTiles - 3;  // the last unit's last rows clamp to the matrix's last
  std::vector<uint8_t> codes(size_t(n_rows) * size_t(c.k / 2)), scales(size_t(n_rows) * size_t(c.k / 16));
  const int n = c.s1 > c.s0 ? (c.s1 - c.s0 + kUnroll - 1) / kUnroll : 0;
  const int nw = nvfp4_lane_whole_stages(c.s0, c.s1, k_chunks, kUnroll, c.whole_steps);
  const std::string where = "K " + std::to_string(c.k) + " steps [" + std::to_string(c.s0) + ", " +
                            std::to_string(c.s1) + ") tiles " + std::to_string(kTiles) + " unroll " +
                            std::to_string(kUnroll) + " slots " + std::to_string(kStages) + " units " +
                            std::to_string(c.units);
  ASSERT_LE(n - nw, 1) << "at most the last stage is not whole: " << where;
  for (int g = 0; g < 8; g += 7)
    for (int t = 0; t < 4; ++t) {
      constexpr int kSlotBytes = 4096;  // any slot size: the cursor's offsets name the slots
      std::map<std::pair<int, int>, Copy> slots;  // (slot offset, slot word) -> the copy it holds
      int issued = 0, iu = 0, ij = 0;
      Nvfp4LaneSrc<kTiles> src;
      auto issue = [&](int slot_off) {  // linear_nvfp4_x1_kernel's issue (one unit: the stream ring's)
        if (iu >= c.units || n == 0) return;
        if (ij == 0) {
          const uint8_t* wrow[kTiles][2];
          const uint8_t* srow[kTiles][2];
          unit_rows<kTiles>(codes, scales, c.k, n_rows, iu, g, wrow, srow);
          src.at(wrow, srow, c.s0, t);
        }
        for (int u = 0; u < kUnroll; ++u)
          for (int i = 0; i < kTiles; ++i)
            for (int h = 0; h < 2; ++h) {
              Copy& d = slots[{slot_off, nvfp4_slot_word<kTiles>(u, i, h)}];
              d = Copy{};
              if (ij < nw) {
                d = {src.codes(i, h) + u * kNvfp4LaneStepBytes, src.scales(i, h) + u * kNvfp4LaneStepScaleBytes, true,
                     issued};
              } else {
                const Nvfp4TailCopy tc = nvfp4_lane_tail_copy(c.s0 + ij * kUnroll, u, c.s1, k_chunks, t);
                if (tc.copy) d = {src.codes(i, h) + tc.codes, src.scales(i, h) + tc.scales, tc.ok, issued};
              }
            }
        if (ij < nw) src.step(kUnroll);
        ++issued;
        if (++ij == n) ij = 0, ++iu;
      };
      for (int j = 0; j < kStages - 1; ++j) issue(j * kSlotBytes);
      Nvfp4SlotCursor<kStages, kSlotBytes> cur;
      int read = 0;
      for (int unit = 0; unit < c.units; ++unit) {
        const uint8_t* wrow[kTiles][2];
        const uint8_t* srow[kTiles][2];
        unit_rows<kTiles>(codes, scales, c.k, n_rows, unit, g, wrow, srow);
        for (int j = 0; j < n; ++j, ++read) {
          issue(cur.wr);
          ASSERT_GE(cur.rd, 0);
          ASSERT_LT(cur.rd, kStages * kSlotBytes);
          const int steps = j < nw ? kUnroll : c.s1 - c.s0 - j * kUnroll;
          for (int u = 0; u < kUnroll; ++u)
            for (int i = 0; i < kTiles; ++i)
              for (int h = 0; h < 2; ++h) {
                const Copy& got = slots[{cur.rd, nvfp4_slot_word<kTiles>(u, i, h)}];
                const int s = c.s0 + j * kUnroll + u;
                if (u >= steps || s >= c.s1) {  // not read; no step at or past s1 is copied
                  EXPECT_TRUE(got.stage != read || got.codes == nullptr) << where << " step " << s << " copied";
                  continue;
                }
                const int ch = 4 * s + t, last = k_chunks - 1, cc = std::min(ch, last);
                ASSERT_EQ(got.stage, read) << where << " unit " << unit << " stage " << j << " u " << u;
                EXPECT_EQ(got.ok, ch <= last) << where << " step " << s << " t " << t;
                EXPECT_EQ(got.codes, wrow[i][h] + size_t(cc) * 16)
                    << where << " step " << s << " t " << t << " row " << i << h;
                EXPECT_EQ(got.scales, srow[i][h] + size_t(2 * (cc & ~1))) << where << " step " << s << " t " << t;
              }
          cur.next();
        }
      }
      EXPECT_EQ(issued, c.units * n) << where;
    }
}

template <int kTiles, int kUnroll, int kStages>
void run_all() {
  std::vector<Case> cases;
  for (int k : {2048, 1408, 7168, 18432, 576, 1472}) {  // 1472: K % 128 == 64, a short last step
    const int steps = (k / 32 + 3) / 4;
    for (int split : {1, 2, 3, 8}) {
      const int per = (steps + split - 1) / split;
      for (int part = 0; part < split; ++part) {
        const int s0 = std::min(steps, part * per), s1 = std::min(steps, s0 + per);
        for (int units : {1, 3}) {
          cases.push_back({k, s0, s1, units, false});
          if (k % 128 == 0) cases.push_back({k, s0, s1, units, true});
        }
      }
    }
  }
  for (const Case& c : cases) run<kTiles, kUnroll, kStages>(c);
}

TEST(Nvfp4Lane, StagesCopyEachLanesChunksIntoTheSlotsRead) {
  run_all<1, 1, 4>();
  run_all<1, 2, 2>();
  run_all<1, 4, 2>();
  run_all<2, 1, 2>();
  run_all<2, 2, 2>();
  run_all<1, 2, 3>();  // the MoE down ring's depth
}

// The register path (nvfp4_mma_stream_staged_regs): stage j loaded straight into registers, whole
// stages through the lane's pointers with the chunk's own 2 scale bytes, the last one (when not
// whole) through nvfp4_lane_tail_copy; against the chunk-indexed loads: chunk c = 4 s + t at
// wrow + 16 c, its scales at srow + 2 c, zeros at or past s1 and past k_chunks.
template <int kTiles, int kUnroll>
void run_regs(const Case& c) {
  const int k_chunks = c.k / 32;
  const int n_rows = 16 * kTiles - 3;
  std::vector<uint8_t> codes(size_t(n_rows) * size_t(c.k / 2)), scales(size_t(n_rows) * size_t(c.k / 16));
  const int n = c.s1 > c.s0 ? (c.s1 - c.s0 + kUnroll - 1) / kUnroll : 0;
  const int nw = nvfp4_lane_whole_stages(c.s0, c.s1, k_chunks, kUnroll, false);
  for (int g = 0; g < 8; g += 7)
    for (int t = 0; t < 4; ++t) {
      const uint8_t* wrow[kTiles][2];
      const uint8_t* srow[kTiles][2];
      unit_rows<kTiles>(codes, scales, c.k, n_rows, 0, g, wrow, srow);
      Nvfp4LaneSrc<kTiles> src;
      src.at(wrow, srow, c.s0, t, /*pair_word=*/false);
      for (int j = 0; j < n; ++j) {
        for (int u = 0; u < kUnroll; ++u) {
          const int s = c.s0 + j * kUnroll + u, ch = 4 * s + t;
          const bool want_ok = s < c.s1 && ch < k_chunks;
          for (int i = 0; i < kTiles; ++i)
            for (int h = 0; h < 2; ++h) {
              const uint8_t *w, *sc;
              bool ok = true;
              if (j < nw) {
                w = src.codes(i, h) + u * kNvfp4LaneStepBytes;
                sc = src.scales(i, h) + u * kNvfp4LaneStepScaleBytes;
              } else {
                const Nvfp4TailCopy tc = nvfp4_lane_tail_copy(c.s0 + j * kUnroll, u, c.s1, k_chunks, t, false);
                ok = tc.copy && tc.ok;
                w = src.codes(i, h) + tc.codes;
                sc = src.scales(i, h) + tc.scales;
              }
              ASSERT_EQ(ok, want_ok) << "K " << c.k << " step " << s << " t " << t;
              if (!ok) continue;
              EXPECT_EQ(w, wrow[i][h] + size_t(ch) * 16) << "K " << c.k << " step " << s << " t " << t;
              EXPECT_EQ(sc, srow[i][h] + size_t(2 * ch)) << "K " << c.k << " step " << s << " t " << t;
            }
        }
        if (j < nw) src.step(kUnroll);
      }
    }
}

TEST(Nvfp4Lane, RegisterPathLoadsEachLanesChunks) {
  for (int k : {2048, 1408, 7168, 16384, 576, 1472}) {
    const int steps = (k / 32 + 3) / 4;
    for (int split : {1, 2, 3, 8}) {
      const int per = (steps + split - 1) / split;
      for (int part = 0; part < split; ++part) {
        const Case c{k, std::min(steps, part * per), std::min(steps, std::min(steps, part * per) + per), 1, false};
        run_regs<1, 1>(c);
        run_regs<1, 2>(c);
        run_regs<1, 4>(c);
        run_regs<2, 1>(c);
        run_regs<2, 2>(c);
      }
    }
  }
}

TEST(Nvfp4Lane, SlotWordsAreDistinctAndInsideTheStage) {
  std::vector<int> seen;
  for (int u = 0; u < 4; ++u)
    for (int i = 0; i < 2; ++i)
      for (int h = 0; h < 2; ++h) seen.push_back(nvfp4_slot_word<2>(u, i, h));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen.back(), (4 * 2 * 2 - 1) * 32);  // a lane's last word of w[4][2][2][32]
}

TEST(Nvfp4Lane, CursorVisitsSlotsInRingOrder) {
  Nvfp4SlotCursor<3, 100> c;
  const int rd[] = {0, 100, 200, 0, 100}, wr[] = {200, 0, 100, 200, 0};
  for (int j = 0; j < 5; ++j, c.next()) {
    EXPECT_EQ(c.rd, rd[j]) << j;
    EXPECT_EQ(c.wr, wr[j]) << j;
  }
}

}  // namespace
}  // namespace pg::ops::cuda
