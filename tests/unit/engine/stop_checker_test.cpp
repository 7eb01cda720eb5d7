// StopChecker: stop strings across 2-3 deltas, overlapping and self-overlapping stop strings,
// a stop at the very start, unicode, held-back text released at the end, stop tokens / EOS /
// max_tokens, and a property test: the output never depends on how the text is split.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/stop_checker.h"

namespace pg {
namespace {

constexpr int32_t kEos = 99;
constexpr int32_t kTok = 5;  // an ordinary token
const std::vector<int32_t> kEosIds = {kEos};

SamplingParams with_stops(std::vector<std::string> stop) {
  SamplingParams p;
  p.stop = std::move(stop);
  return p;
}

// Feeds each delta as one ordinary token; returns everything emitted (plus the final flush when
// it did not stop) and the last update.
struct Streamed {
  std::vector<std::string> emitted;  // per delta
  std::string all;
  StopUpdate last;
};
Streamed feed(const SamplingParams& p, const std::vector<std::string>& deltas) {
  StopChecker sc(p, kEosIds);
  Streamed r;
  for (const std::string& d : deltas) {
    r.last = sc.on_token(kTok, d);
    r.emitted.push_back(r.last.text);
    r.all += r.last.text;
    if (sc.finished()) return r;
  }
  r.all += sc.flush();
  return r;
}

TEST(StopChecker, NoStopsStreamsEverything) {
  const Streamed r = feed(SamplingParams{}, {"Hello", ", ", "world"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"Hello", ", ", "world"}));
  EXPECT_EQ(r.last.finish, FinishReason::kNone);
}

TEST(StopChecker, StopAcrossTwoDeltas) {
  const Streamed r = feed(with_stops({"END"}), {"Hello E", "ND more"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"Hello ", ""}));
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_string, "END");
  EXPECT_FALSE(r.last.stop_token_id);
}

TEST(StopChecker, StopAcrossThreeDeltas) {
  const Streamed r = feed(with_stops({"<|stop|>"}), {"abc<|", "st", "op|>xyz"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"abc", "", ""}));
  EXPECT_EQ(r.last.stop_string, "<|stop|>");
  EXPECT_EQ(r.all, "abc");
}

TEST(StopChecker, FalseStartIsReleased) {
  const Streamed r = feed(with_stops({"END"}), {"Hello E", "ast", " EN", "D"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"Hello ", "East", " ", ""}));
  EXPECT_EQ(r.all, "Hello East ");
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
}

TEST(StopChecker, StopAtTheVeryStart) {
  Streamed r = feed(with_stops({"Hello"}), {"Hello world"});
  EXPECT_EQ(r.all, "");
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
  r = feed(with_stops({"\n"}), {"\n", "never"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{""}));
  EXPECT_EQ(r.last.stop_string, "\n");
}

TEST(StopChecker, FirstMatchToEndWins) {
  // "bc" ends before "abcd" does: that is what a token-by-token stream sees first.
  Streamed r = feed(with_stops({"abcd", "bc"}), {"xabcd"});
  EXPECT_EQ(r.all, "xa");
  EXPECT_EQ(r.last.stop_string, "bc");
  r = feed(with_stops({"abcd", "bc"}), {"x", "a", "b", "c", "d"});
  EXPECT_EQ(r.all, "xa");
  EXPECT_EQ(r.last.stop_string, "bc");
  // Both end on the same byte: the longer one (earlier start) wins, whatever the list order.
  r = feed(with_stops({"bc", "abc"}), {"xabc"});
  EXPECT_EQ(r.all, "x");
  EXPECT_EQ(r.last.stop_string, "abc");
}

TEST(StopChecker, SelfOverlappingStop) {
  // "aab" after "aaa": the automaton falls back to "aa" instead of restarting.
  const Streamed r = feed(with_stops({"aab"}), {"a", "a", "a", "b"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(r.last.stop_string, "aab");
}

TEST(StopChecker, UnicodeStops) {
  // "é" is C3 A9 and "世" E4 B8 96: holding back and cutting happen on character boundaries.
  Streamed r = feed(with_stops({"é世"}), {"café", "世界"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"caf", ""}));
  EXPECT_EQ(r.last.stop_string, "é世");
  r = feed(with_stops({"世界"}), {"你好世", "人"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"你好", "世人"}));
  r = feed(with_stops({"👋"}), {"hi ", "👋", " there"});
  EXPECT_EQ(r.all, "hi ");
}

TEST(StopChecker, HeldBackTextFlushedAtTheEnd) {
  StopChecker sc(with_stops({"END", "</answer>"}), kEosIds);
  EXPECT_EQ(sc.on_token(kTok, "abc </ans").text, "abc ");
  EXPECT_EQ(sc.n_held(), 5u);
  EXPECT_EQ(sc.on_token(kTok, "x").text, "</ansx");  // no longer a prefix: released
  EXPECT_EQ(sc.on_token(kTok, " EN").text, " ");
  EXPECT_EQ(sc.flush(), "EN");
  EXPECT_TRUE(sc.finished());
  EXPECT_EQ(sc.flush(), "");
}

TEST(StopChecker, LengthReleasesHeldBackText) {
  SamplingParams p = with_stops({"END"});
  p.max_tokens = 2;
  StopChecker sc(p, kEosIds);
  EXPECT_EQ(sc.on_token(kTok, "abc EN").text, "abc ");
  const StopUpdate u = sc.on_token(kTok, "");
  EXPECT_EQ(u.finish, FinishReason::kLength);
  EXPECT_EQ(u.text, "EN");
  EXPECT_TRUE(sc.finished());
  EXPECT_EQ(sc.n_tokens(), 2);
  // The detokenizer's final bytes after the limit pass through; then nothing is left.
  EXPECT_EQ(sc.on_text("\xEF\xBF\xBD").text, "\xEF\xBF\xBD");
  EXPECT_EQ(sc.flush(), "");
  EXPECT_EQ(sc.on_text("late").text, "");
}

TEST(StopChecker, CallerTokenCap) {
  StopChecker sc(SamplingParams{}, kEosIds, 3);  // max_tokens unset
  EXPECT_EQ(sc.on_token(kTok, "a").finish, FinishReason::kNone);
  EXPECT_EQ(sc.on_token(kTok, "b").finish, FinishReason::kNone);
  EXPECT_EQ(sc.on_token(kTok, "c").finish, FinishReason::kLength);
  SamplingParams p;
  p.max_tokens = 1;
  StopChecker both(p, kEosIds, 3);  // the smaller limit wins
  EXPECT_EQ(both.on_token(kTok, "a").finish, FinishReason::kLength);
}

TEST(StopChecker, EosAndStopTokens) {
  StopChecker sc(with_stops({"END"}), kEosIds);
  EXPECT_EQ(sc.on_token(kTok, "hi E").text, "hi ");
  const StopUpdate u = sc.on_token(kEos, "</s>");
  EXPECT_EQ(u.finish, FinishReason::kStop);
  EXPECT_EQ(u.text, "E");  // held-back text released; the EOS text dropped
  EXPECT_EQ(u.stop_token_id, kEos);
  EXPECT_FALSE(u.stop_string);

  SamplingParams p;
  p.ignore_eos = true;
  p.stop_token_ids = {7};
  StopChecker ig(p, kEosIds);
  EXPECT_EQ(ig.on_token(kEos, "x").finish, FinishReason::kNone);
  const StopUpdate s = ig.on_token(7, "seven");
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.stop_token_id, 7);
  EXPECT_EQ(s.text, "");
}

TEST(StopChecker, PriorityOnOneToken) {
  SamplingParams p = with_stops({"END"});
  p.max_tokens = 2;
  StopChecker sc(p, kEosIds);
  EXPECT_EQ(sc.on_token(kTok, "ok E").text, "ok ");
  const StopUpdate u = sc.on_token(kTok, "ND");  // stop string on the last allowed token
  EXPECT_EQ(u.finish, FinishReason::kStop);
  EXPECT_EQ(u.stop_string, "END");
  EXPECT_EQ(u.text, "");
  p.stop_token_ids = {kTok};
  StopChecker tok(p, kEosIds);
  EXPECT_EQ(tok.on_token(kTok, "END").stop_token_id, kTok);  // the token outranks its text
}

TEST(StopChecker, FinalDetokenizerTextIsChecked) {
  StopChecker sc(with_stops({"ab"}), kEosIds);
  EXPECT_EQ(sc.on_token(kTok, "xa").text, "x");
  const StopUpdate u = sc.on_text("b");
  EXPECT_EQ(u.finish, FinishReason::kStop);
  EXPECT_EQ(u.text, "");
  EXPECT_EQ(sc.on_text("more").text, "");  // nothing after a stop
  EXPECT_EQ(sc.flush(), "");
}

TEST(StopChecker, FinishReasonNames) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::kNone), "");
}

// The definition, on the whole text: cut before the first stop string to end (the longer on a
// tie); without a match everything is output.
std::pair<std::string, std::string> expected_cut(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    const std::string* best = nullptr;
    for (const std::string& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 && (!best || s.size() > best->size()))
        best = &s;
    if (best) return {text.substr(0, end - best->size()), *best};
  }
  return {text, ""};
}

// Longest suffix of `text` that is a proper prefix of a stop string.
size_t expected_hold(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

TEST(StopChecker, IndependentOfHowTextIsSplit) {
  std::mt19937 gen(31);
  const std::vector<std::string> stops = {"abc", "bca", "cc", "abcab", "aab", "é"};
  const std::vector<std::string> alphabet = {"a", "b", "c", "é", "x"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = int(gen() % 24);
    for (int i = 0; i < len; ++i) text += alphabet[gen() % (trial % 2 ? 3 : alphabet.size())];
    const auto [want_text, want_stop] = expected_cut(text, stops);
    // Random split points on character boundaries.
    std::vector<std::string> deltas;
    for (size_t i = 0; i < text.size();) {
      size_t j = std::min(text.size(), i + 1 + gen() % 4);
      while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
      deltas.push_back(text.substr(i, j - i));
      i = j;
    }
    StopChecker sc(with_stops(stops), kEosIds);
    std::string seen, out;
    StopUpdate last;
    for (const std::string& d : deltas) {
      seen += d;
      last = sc.on_token(kTok, d);
      out += last.text;
      if (sc.finished()) break;
      // Never past or into a stop string, and nothing held back that could not become one.
      ASSERT_EQ(out, seen.substr(0, seen.size() - expected_hold(seen, stops))) << text;
    }
    if (!sc.finished()) out += sc.flush();
    ASSERT_EQ(out, want_text) << text;
    ASSERT_EQ(last.stop_string.value_or(""), want_stop) << text;
  }
}

}  // namespace
}  // namespace pg
