// DeepSeek tool-call parser: V3 and V3.1 formats, whole and split at every byte (streaming-safe).
#include "server/tool_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace pg::server {
namespace {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;           // from the parser's record
  std::vector<ToolCall> from_deltas;     // rebuilt from the streamed deltas
};

void apply(const ToolParseDelta& d, Parsed& p) {
  p.content += d.content;
  for (const auto& c : d.calls) {
    if (c.index >= int(p.from_deltas.size())) {
      ASSERT_EQ(c.index, int(p.from_deltas.size())) << "calls are announced in order";
      ASSERT_FALSE(c.name.empty()) << "the first delta of a call names it";
      p.from_deltas.push_back({c.id, c.name, ""});
    }
    p.from_deltas[size_t(c.index)].arguments += c.arguments;
  }
}

// Feeds `text` in pieces of `step` bytes (0: all at once).
Parsed parse(const std::string& text, size_t step) {
  ToolCallParser parser("call_x");
  Parsed p;
  if (step == 0) {
    apply(parser.feed(text), p);
  } else {
    for (size_t i = 0; i < text.size(); i += step) apply(parser.feed(text.substr(i, step)), p);
  }
  apply(parser.finish(), p);
  p.calls = parser.calls();
  return p;
}

const std::string kV3 =
    "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"city\": \"Paris\", \"unit\": \"c\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
    "get_time\n```json\n{\"tz\": \"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(ToolParser, V3TwoCallsAtEverySplit) {
  for (size_t step : {0, 1, 2, 3, 5, 7, 13}) {
    Parsed p = parse(kV3, step);
    SCOPED_TRACE(step);
    EXPECT_EQ(p.content, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\", \"unit\": \"c\"}");
    EXPECT_EQ(p.calls[1].name, "get_time");
    EXPECT_EQ(p.calls[1].arguments, "{\"tz\": \"CET\"}");
    EXPECT_EQ(p.calls[0].id, "call_x0");
    ASSERT_EQ(p.from_deltas.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(p.from_deltas[i].name, p.calls[i].name);
      EXPECT_EQ(p.from_deltas[i].arguments, p.calls[i].arguments);
      EXPECT_EQ(p.from_deltas[i].id, p.calls[i].id);
    }
  }
}

TEST(ToolParser, V31Format) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"a```b\"}<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{\"x\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  for (size_t step : {0, 1, 4}) {
    Parsed p = parse(text, step);
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "search");
    EXPECT_EQ(p.calls[0].arguments, "{\"q\": \"a```b\"}");
    EXPECT_EQ(p.calls[1].name, "function");
    EXPECT_EQ(p.calls[1].arguments, "{\"x\": 1}");
  }
}

TEST(ToolParser, PlainTextPassesThroughIncludingLookalikes) {
  const std::string text = "a < b and <｜tool not a marker <｜tool▁call and more";
  for (size_t step : {0, 1, 3}) {
    Parsed p = parse(text, step);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
  }
}

TEST(ToolParser, HoldsBackOnlyWhatMayBeAMarker) {
  ToolCallParser parser("c");
  EXPECT_EQ(parser.feed("hello <｜tool").content, "hello ");
  EXPECT_EQ(parser.feed("kit").content, "<｜toolkit");
}

TEST(ToolParser, CutOffInsideArgumentsKeepsWhatArrived) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": [1, 2";
  Parsed p = parse(text, 1);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": [1, 2");
  EXPECT_EQ(p.from_deltas[0].arguments, p.calls[0].arguments);
}

TEST(ToolParser, CutOffInsideHeaderReportsNothing) {
  Parsed p = parse("hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>func", 2);
  EXPECT_EQ(p.content, "hi");
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolParser, ArgumentsStreamBeforeTheCallEnds) {
  ToolCallParser parser("c");
  auto d = parser.feed("<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": ");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[0].arguments, "{\"a\":");  // trailing space held back (may be the fence)
  d = parser.feed("1}\n``");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, " 1}");
  d = parser.feed("`<｜tool▁call▁end｜>");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(parser.calls()[0].arguments, "{\"a\": 1}");
}

TEST(ToolParser, ContentAfterTheBlockIsContent) {
  Parsed p = parse(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>x<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜> done", 3);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, " done");
}

TEST(PartialMarker, Suffixes) {
  EXPECT_EQ(partial_marker_suffix("abc<", "<x>"), 1u);
  EXPECT_EQ(partial_marker_suffix("abc<x", "<x>"), 2u);
  EXPECT_EQ(partial_marker_suffix("abc<x>", "<x>"), 0u);  // complete markers are not partial
  EXPECT_EQ(partial_marker_suffix("", "<x>"), 0u);
}

}  // namespace
}  // namespace pg::server
