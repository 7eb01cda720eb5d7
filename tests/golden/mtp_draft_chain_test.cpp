// The MTP draft chain's positions (model_runner.h, "Draft chains"): depth d >= 1 feeds the depth
// d-1 draft (the token at last + d) with the previous MTP output at position last + d - 1, as
// DeepSeek-V3's MTP (vLLM's deepseek_mtp) runs it, so every MTP KV row a depth attends holds the
// input of its own position. Checked against one-shot MTP passes on a fresh cache, which write
// every row they attend themselves; the chain runs on a cache whose MTP rows were filled with
// junk first, so a depth that attends a row it did not write (or runs at another position) fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "golden_util.h"
#include "model/deepseek_model.h"
#include "model/model_runner.h"

namespace pg {
namespace {

constexpr int64_t kBlockSize = 4;  // small, so the chain's positions cross blocks
constexpr int64_t kBlocks = 8;

struct ArgmaxPicker final : DraftPicker {
  int32_t pick(size_t, int64_t, std::span<const float> logits) override {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
};

std::unique_ptr<CpuRunner> make_runner(const std::string& name) {
  auto model = DeepseekModel::load(golden::model_dir(name));
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return nullptr;
  return std::make_unique<CpuRunner>(std::move(model).value(), kBlocks, kBlockSize);
}

class MtpDraftChain : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpDraftChain, DepthsAttendRowsTheyWrote) {
  constexpr int64_t kPrompt = 9, kDrafts = 4;  // depths 1..3 run at positions 9..11
  auto chain = make_runner(GetParam());
  auto fresh = make_runner(GetParam());
  ASSERT_TRUE(chain && fresh);
  ASSERT_GT(chain->n_mtp_layers(), 0);
  const int64_t vocab = chain->config().vocab_size, H = chain->config().hidden_size;
  std::vector<int32_t> table(kBlocks);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> seq(kPrompt);
  for (int64_t i = 0; i < kPrompt; ++i) seq[size_t(i)] = int32_t((i * 7919 + 11) % vocab);

  // Junk in every MTP row the chain may touch: other tokens, other hidden states.
  {
    std::vector<int32_t> junk(kPrompt + kDrafts + 2);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = int32_t((i * 104729 + 3) % size_t(vocab));
    std::vector<float> h(junk.size() * size_t(H));
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(int64_t(i * 2654435761u % 2001) - 1000) / 250.0f;
    const SeqStep s{junk, 0, table};
    StepOutput o;
    ASSERT_TRUE(chain->forward_mtp(0, std::span(&s, 1), h, o).ok());
  }
  // The main model over the prompt; its greedy token is the sequence's last, at position kPrompt.
  StepOutput main;
  const SeqStep ms{seq, 0, table};
  ASSERT_TRUE(chain->forward(std::span(&ms, 1), main).ok());
  ASSERT_EQ(int64_t(main.hidden_all.size()), kPrompt * H);
  seq.push_back(int32_t(std::max_element(main.logits.begin(), main.logits.end()) - main.logits.begin()));

  // The chain: catch-up over positions 0..kPrompt-1 (the token at p + 1 with the hidden at p).
  const SeqStep cs{std::span<const int32_t>(seq).subspan(1), 0, table};
  DraftRow row;
  row.n_drafts = kDrafts, row.last_pos = kPrompt, row.block_table = table, row.want_logits = true;
  ArgmaxPicker picker;
  DraftOutput out;
  ASSERT_TRUE(chain->draft_chain(0, std::span(&cs, 1), main.hidden_all, std::span(&row, 1), picker, out).ok());
  ASSERT_EQ(int64_t(out.tokens[0].size()), kDrafts);
  ASSERT_EQ(int64_t(out.logits[0].size()), kDrafts * vocab);

  // Depth d as one pass from position 0 on a fresh cache: tokens [seq[1..], drafts 0..d-1] with
  // hidden [main hidden, MTP outputs of depths 0..d-1]; its last row is depth d, at position
  // kPrompt - 1 + d. One-token chain steps and a many-token pass may round differently, so the
  // logits must agree within 1e-4 of their range (the CPU ops agree bit for bit today; the old
  // positions, last + d, missed by 0.8% to 50% of the range) and pick the same draft.
  std::vector<int32_t> toks(seq.begin() + 1, seq.end());
  std::vector<float> hid = main.hidden_all;
  for (int64_t d = 0; d < kDrafts; ++d) {
    const SeqStep rs{toks, 0, table};
    StepOutput ref;
    ASSERT_TRUE(fresh->forward_mtp(0, std::span(&rs, 1), hid, ref).ok());
    ASSERT_EQ(ref.n_rows, 1);
    const float* got = &out.logits[0][size_t(d * vocab)];
    const auto [lo, hi] = std::minmax_element(ref.logits.begin(), ref.logits.end());
    const float tol = 1e-4f * (*hi - *lo);
    float worst = 0;
    for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(got[v] - ref.logits[size_t(v)]));
    EXPECT_LE(worst, tol) << GetParam() << " depth " << d << " (position " << kPrompt - 1 + d << ")";
    EXPECT_EQ(out.tokens[0][size_t(d)], int32_t(hi - ref.logits.begin())) << GetParam() << " depth " << d;
    toks.push_back(out.tokens[0][size_t(d)]);
    hid.insert(hid.end(), ref.hidden.begin(), ref.hidden.end());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MtpDraftChain, ::testing::Values("v3_tiny", "v3_odd_dims", "v3_tiny_fp8", "peregrine_tiny"));

}  // namespace
}  // namespace pg
