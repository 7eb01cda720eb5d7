// Status / Result / PG_TRY behaviour.
#include <gtest/gtest.h>

#include "core/status.h"

namespace pg {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be > 0, got {}", x);
  return x;
}

Status twice(int x, int* out) {
  PG_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = 2 * v;
  return ok_status();
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(ok_status().ok());
  Status s = not_found("tensor '{}' missing", "w");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: tensor 'w' missing");
  EXPECT_EQ(s.with_context("model.safetensors").message(), "model.safetensors: tensor 'w' missing");
}

TEST(Status, ResultPropagates) {
  int out = 0;
  EXPECT_TRUE(twice(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status s = twice(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x must be > 0, got -1");
}

TEST(Status, ResultFromOkStatusIsAnError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace pg
