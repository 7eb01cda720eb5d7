// SSE framing and the API-key check (constant-time comparison, Bearer parsing).
#include <gtest/gtest.h>

#include "server/auth.h"
#include "server/sse.h"

namespace pg::server {
namespace {

TEST(Sse, OneLine) { EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n"); }

TEST(Sse, MultiLinePayloadBecomesSeveralDataFields) {
  EXPECT_EQ(sse_event("a\nb\r\nc"), "data: a\ndata: b\ndata: c\n\n");
}

TEST(Sse, Done) { EXPECT_EQ(kSseDone, "data: [DONE]\n\n"); }

TEST(Auth, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secret", "secreT"));
  EXPECT_FALSE(constant_time_equals("secret", "secret2"));
  EXPECT_FALSE(constant_time_equals("secret", ""));
  EXPECT_FALSE(constant_time_equals(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
  EXPECT_FALSE(constant_time_equals(std::string_view("a\0", 2), "a"));  // zero padding is not equality
}

TEST(Auth, Bearer) {
  EXPECT_TRUE(authorized("", ""));  // no key configured
  EXPECT_TRUE(authorized("Bearer k1", "k1"));
  EXPECT_TRUE(authorized("bearer k1", "k1"));
  EXPECT_TRUE(authorized("  Bearer   k1 ", "k1"));
  EXPECT_FALSE(authorized("", "k1"));
  EXPECT_FALSE(authorized("k1", "k1"));
  EXPECT_FALSE(authorized("Basic k1", "k1"));
  EXPECT_FALSE(authorized("Bearer k2", "k1"));
  EXPECT_FALSE(authorized("Bearer ", "k1"));
  EXPECT_FALSE(authorized("Bearer k1k1", "k1"));
}

}  // namespace
}  // namespace pg::server
