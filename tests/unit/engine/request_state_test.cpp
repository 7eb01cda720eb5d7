// RequestState's greedy verification from targets drawn elsewhere (the GPU sampler's rows):
// the drafts that match are appended, then the target's token at the first mismatch, or one more
// after the last draft; the same tokens and counts as the host's verify over the rows' logits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/request_state.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace pg {
namespace {

const std::string kModelDir = std::string(PG_SOURCE_DIR) + "/tests/golden/v3_tiny";

struct Verify {
  std::vector<int32_t> appended;
  int64_t accepted = 0;
  std::optional<std::string> reason;
};

// A greedy request after a 3-token prompt with `drafts` pending, verified either from targets or
// from one-hot logit rows whose argmaxes are those targets.
Verify run(const Tokenizer& tok, const std::vector<int32_t>& drafts, const std::vector<int32_t>& targets, bool rows,
           int64_t max_tokens = 100) {
  GenerationRequest req;
  req.prompt_ids = {1, 2, 3};
  req.params.temperature = 0;
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  RequestState r(std::move(req), [](GenerationEvent&&) {}, tok, 4096);
  r.drafts = drafts;
  GenerationEvent ev;
  Verify v;
  if (rows) {
    const int64_t vocab = tok.vocab_size();
    std::vector<float> logits(targets.size() * size_t(vocab), 0.0f);
    for (size_t i = 0; i < targets.size(); ++i) logits[i * size_t(vocab) + size_t(targets[i])] = 5.0f;
    Sampler sampler;
    v.reason = r.verify(logits, vocab, sampler, ev, &v.accepted);
  } else {
    std::vector<SampledToken> t(targets.size());
    for (size_t i = 0; i < targets.size(); ++i) t[i].token_id = targets[i];
    v.reason = r.verify_greedy(t, ev, &v.accepted);
  }
  v.appended = ev.token_ids;
  EXPECT_TRUE(r.drafts.empty());
  EXPECT_EQ(r.n_verify_steps, 1);
  EXPECT_EQ(r.n_drafted, int64_t(drafts.size()));
  return v;
}

TEST(RequestStateVerify, GreedyTargetsAsTheHostRows) {
  auto tok = Tokenizer::load(kModelDir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  struct Case {
    std::vector<int32_t> drafts, targets, appended;
    int64_t accepted;
  };
  const Case cases[] = {
      {{10, 11, 12}, {10, 11, 12, 13}, {10, 11, 12, 13}, 3},  // all accepted, plus one
      {{10, 11, 12}, {10, 20, 12, 13}, {10, 20}, 1},          // the first mismatch ends it
      {{10}, {30, 31}, {30}, 0},                              // none accepted: the target's token
  };
  for (const Case& c : cases)
    for (bool rows : {false, true}) {
      const Verify v = run(*tok, c.drafts, c.targets, rows);
      EXPECT_EQ(v.appended, c.appended) << (rows ? "rows" : "targets");
      EXPECT_EQ(v.accepted, c.accepted) << (rows ? "rows" : "targets");
      EXPECT_FALSE(v.reason.has_value());
    }
  // max_tokens = 2 stops inside the accepted run, as the host's verify does.
  for (bool rows : {false, true}) {
    const Verify v = run(*tok, {10, 11, 12}, {10, 11, 12, 13}, rows, 2);
    EXPECT_EQ(v.appended, (std::vector<int32_t>{10, 11}));
    EXPECT_EQ(v.reason, std::optional<std::string>("length"));
  }
}

TEST(RequestStateVerify, GreedyTargetsOfTheWrongCountAreAnError) {
  auto tok = Tokenizer::load(kModelDir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Verify v = run(*tok, {10, 11}, {10, 11}, false);  // 2 targets for 2 drafts: 3 expected
  EXPECT_EQ(v.reason, std::optional<std::string>("error"));
  EXPECT_TRUE(v.appended.empty());
}

}  // namespace
}  // namespace pg
