// Reasoning/content split: starting inside an opened <think>, an explicit <think>, none; split
// markers at every byte boundary.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

namespace pg::server {
namespace {

ReasoningDelta run(bool starts_inside, const std::string& text, size_t step) {
  ReasoningParser p(starts_inside);
  ReasoningDelta all;
  auto add = [&](const ReasoningDelta& d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
  };
  for (size_t i = 0; i < text.size(); i += step) add(p.feed(text.substr(i, step)));
  add(p.finish());
  return all;
}

TEST(ReasoningParser, StartsInsideOpenedBlock) {
  for (size_t step : {1, 2, 3, 100}) {
    auto d = run(true, "Let me think.\nOK.</think>\n\nThe answer is 4.", step);
    EXPECT_EQ(d.reasoning, "Let me think.\nOK.");
    EXPECT_EQ(d.content, "\n\nThe answer is 4.");
  }
}

TEST(ReasoningParser, ModelOpensTheBlockItself) {
  for (size_t step : {1, 4, 100}) {
    auto d = run(false, "<think>hmm</think>yes", step);
    EXPECT_EQ(d.reasoning, "hmm");
    EXPECT_EQ(d.content, "yes");
    auto d2 = run(true, "\n<think>\nhmm</think>yes", step);  // older R1 templates
    EXPECT_EQ(d2.reasoning, "\nhmm");
    EXPECT_EQ(d2.content, "yes");
  }
}

TEST(ReasoningParser, NoBlockIsAllContent) {
  for (size_t step : {1, 100}) {
    auto d = run(false, "  <thin ice> and </think> stays", step);
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "  <thin ice> and </think> stays");
  }
}

TEST(ReasoningParser, UnclosedReasoningStaysReasoning) {
  auto d = run(true, "still thinking </thi", 1);
  EXPECT_EQ(d.reasoning, "still thinking </thi");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, HoldsBackAPartialEndMarker) {
  ReasoningParser p(true);
  auto d = p.feed("abc</th");
  EXPECT_EQ(d.reasoning, "abc");
  d = p.feed("ink>x");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "x");
}

TEST(ReasoningParser, DetectsOpenedPrompt) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜>"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>a</think>"));
}

}  // namespace
}  // namespace pg::server
