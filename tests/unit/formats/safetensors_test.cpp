// SafetensorsFile / parse_safetensors_header / writer: round trip, and every malformed-file case
// yields an error that names the file and (where there is one) the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "tests/unit/formats/test_util.h"

namespace pg {
namespace {

using test::iota_bytes;
using test::raw_safetensors;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

// Opens `bytes` written to <tmp>/<name> and expects a failure whose message holds every `parts`.
void expect_open_error(const TempDir& dir, const std::string& bytes, StatusCode code,
                       std::initializer_list<std::string> parts, const std::string& name = "bad.safetensors") {
  const auto p = dir / name;
  write_bytes(p, bytes);
  auto f = SafetensorsFile::open(p);
  ASSERT_FALSE(f.ok()) << "expected an error for " << p;
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_THAT(f.status().message(), HasSubstr(p.string()));
  for (const auto& s : parts) EXPECT_THAT(f.status().message(), HasSubstr(s));
}

TEST(Safetensors, RoundTrip) {
  TempDir dir;
  const auto bf16 = iota_bytes(2 * 3 * 2, 1);
  const auto f32 = iota_bytes(4 * 4, 50);
  const auto u8 = iota_bytes(5, 100);
  const auto f8 = iota_bytes(3 * 2, 7);
  const auto scalar = iota_bytes(4, 9);
  const auto f4 = iota_bytes(4, 200);  // [2, 4] e2m1 -> 8 values, 4 bytes
  std::vector<TensorToWrite> ts = {
      {"model.layers.0.w", DType::kBF16, {2, 3}, bf16},
      {"a.f32", DType::kF32, {4}, f32},
      {"packed.u8", DType::kU8, {5}, u8},
      {"w.fp8", DType::kF8E4M3, {3, 2}, f8},
      {"scalar", DType::kF32, {}, scalar},
      {"empty", DType::kBF16, {0, 4}, {}},
      {"nvfp4", DType::kE2M1, {2, 4}, f4},
  };
  const auto p = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(p, ts, {{"format", "pt"}}).ok());
  EXPECT_FALSE(std::filesystem::exists(p.string() + ".tmp." + std::to_string(::getpid())));

  auto f = SafetensorsFile::open(p);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), ts.size());
  EXPECT_EQ(f->path(), p.string());
  for (const auto& t : ts) {
    const TensorView* v = f->find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(v->name, t.name);
    EXPECT_EQ(v->dtype, t.dtype);
    EXPECT_EQ(v->shape, t.shape);
    EXPECT_EQ(v->n_bytes, t.data.size());
    EXPECT_EQ(*v->file, p.string());
    if (!t.data.empty()) {
      EXPECT_EQ(std::memcmp(v->data, t.data.data(), t.data.size()), 0) << t.name;
    }
    // The writer aligns each tensor to its element size.
    const size_t align = std::max(1, dtype_bits(t.dtype) / 8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % align, 0u) << t.name;
  }
  EXPECT_EQ(f->find("scalar")->numel(), 1);
  EXPECT_EQ(f->find("empty")->numel(), 0);
  EXPECT_EQ(f->find("nvfp4")->numel(), 8);
  EXPECT_EQ(f->find("missing"), nullptr);
  // Header length is a multiple of 8; tensors() is in file order.
  uint64_t n = 0;
  for (size_t i = 1; i < f->tensors().size(); ++i)
    EXPECT_LE(f->tensors()[i - 1].data + f->tensors()[i - 1].n_bytes, f->tensors()[i].data);

  auto bytes = serialize_safetensors(ts, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok());
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ(n % 8, 0u);
  auto h = parse_safetensors_header(*bytes, "mem");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->data_offset, 8 + n);
  EXPECT_EQ(h->entries.size(), ts.size());

  // Moving the file keeps views valid.
  const TensorView* before = f->find("a.f32");
  SafetensorsFile moved = std::move(f).value();
  EXPECT_EQ(moved.find("a.f32"), before);
  EXPECT_EQ(moved.find("a.f32")->name, "a.f32");
}

TEST(Safetensors, EmptyHeaderIsValid) {
  auto bytes = serialize_safetensors({});
  ASSERT_TRUE(bytes.ok());
  auto h = parse_safetensors_header(*bytes, "mem");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_TRUE(h->entries.empty());
}

TEST(SafetensorsWriter, RejectsBadInput) {
  TempDir dir;
  const auto four = iota_bytes(4);
  std::vector<TensorToWrite> wrong_size = {{"w", DType::kBF16, {3}, four}};
  auto s = write_safetensors(dir / "x.safetensors", wrong_size);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'w'"));
  std::vector<TensorToWrite> dup = {{"w", DType::kU8, {4}, four}, {"w", DType::kU8, {4}, four}};
  EXPECT_THAT(write_safetensors(dir / "x.safetensors", dup).message(), HasSubstr("'w' given twice"));
  std::vector<TensorToWrite> meta = {{"__metadata__", DType::kU8, {4}, four}};
  EXPECT_FALSE(write_safetensors(dir / "x.safetensors", meta).ok());
  std::vector<TensorToWrite> odd_f4 = {{"f4", DType::kE2M1, {3}, four}};
  EXPECT_THAT(write_safetensors(dir / "x.safetensors", odd_f4).message(), HasSubstr("whole bytes"));
  EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
  // A directory that does not exist: IoError/NotFound naming the path, no crash.
  std::vector<TensorToWrite> ok = {{"w", DType::kU8, {4}, four}};
  auto s2 = write_safetensors(dir / "no_such_dir" / "x.safetensors", ok);
  EXPECT_FALSE(s2.ok());
  EXPECT_THAT(s2.message(), HasSubstr("no_such_dir"));
}

TEST(SafetensorsBad, MissingFile) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir / "nope.safetensors");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr("nope.safetensors"));
  auto d = SafetensorsFile::open(dir.path());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
}

TEST(SafetensorsBad, Truncated) {
  TempDir dir;
  expect_open_error(dir, "", StatusCode::kDataLoss, {"0 bytes", "too short"});
  expect_open_error(dir, std::string("\x10\0\0", 3), StatusCode::kDataLoss, {"3 bytes", "too short"});
}

TEST(SafetensorsBad, HeaderLengthPastEnd) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors("{}", 0, 1000), StatusCode::kDataLoss, {"header length 1000", "past the end"});
  expect_open_error(dir, raw_safetensors("{}", 0, 1ull << 40), StatusCode::kDataLoss, {"exceeds", "limit"});
  expect_open_error(dir, raw_safetensors("{}", 0, UINT64_MAX - 1), StatusCode::kDataLoss, {"exceeds"});
}

TEST(SafetensorsBad, InvalidJson) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors("{\"w\": {\"dtype\": ", 0), StatusCode::kDataLoss, {"not valid JSON"});
  expect_open_error(dir, raw_safetensors("[1, 2]", 0), StatusCode::kDataLoss, {"JSON object"});
  expect_open_error(dir, raw_safetensors("", 0), StatusCode::kDataLoss, {"JSON object"});
  expect_open_error(dir, raw_safetensors("{} x", 0), StatusCode::kDataLoss, {"not valid JSON"});
}

TEST(SafetensorsBad, EntryShape) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors(R"({"w": 5})", 0), StatusCode::kDataLoss, {"'w'", "must be an object"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "missing \"dtype\""});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "missing \"shape\""});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [1]}})", 1), StatusCode::kDataLoss,
                    {"'w'", "missing \"data_offsets\""});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "\"dtype\" must be a string"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": "1", "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "\"shape\" must be an array"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "non-negative integers", "-1"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "non-negative integers", "1.5"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "[begin, end]"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, -1]}})", 1),
                    StatusCode::kDataLoss, {"'w'", "non-negative"});
  expect_open_error(dir, raw_safetensors(R"({"__metadata__": {"a": 1}})", 0), StatusCode::kDataLoss,
                    {"__metadata__", "\"a\"", "string"});
  expect_open_error(dir, raw_safetensors(R"({"__metadata__": []})", 0), StatusCode::kDataLoss, {"__metadata__"});
}

TEST(SafetensorsBad, UnknownDtype) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors(R"({"layer.w": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 1]}})", 1),
                    StatusCode::kUnsupported, {"'layer.w'", "Q4_K", "supported", "BF16", "F8_E4M3", "U8"});
}

TEST(SafetensorsBad, ShapeTimesDtypeMismatch) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})", 10),
                    StatusCode::kDataLoss, {"'w'", "needs 12 bytes", "hold 10"});
  // 2^62 * 2^62 elements overflows 64 bits: an error, not a wrap-around match.
  expect_open_error(
      dir,
      raw_safetensors(
          R"({"w": {"dtype": "U8", "shape": [4611686018427387904, 4611686018427387904], "data_offsets": [0, 0]}})", 0),
      StatusCode::kDataLoss, {"'w'", "64 bits"});
  // 2^61 elements of BF16 = 2^65 bytes.
  expect_open_error(dir,
                    raw_safetensors(R"({"w": {"dtype": "BF16", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", 0),
                    StatusCode::kDataLoss, {"'w'", "overflows"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}})", 2),
                    StatusCode::kDataLoss, {"'w'", "whole bytes"});
}

TEST(SafetensorsBad, OffsetsOutOfRange) {
  TempDir dir;
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 3),
                    StatusCode::kDataLoss, {"'w'", "past the data section", "3 bytes"});
  expect_open_error(dir, raw_safetensors(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", 4),
                    StatusCode::kDataLoss, {"'w'", "begin > end"});
  // A valid file cut short: the last tensor no longer fits.
  std::vector<uint8_t> a = iota_bytes(16), b = iota_bytes(16);
  std::vector<TensorToWrite> ts = {{"a", DType::kF32, {4}, a}, {"b", DType::kF32, {4}, b}};
  auto bytes = serialize_safetensors(ts);
  ASSERT_TRUE(bytes.ok());
  std::string s(bytes->begin(), bytes->end() - 5);
  expect_open_error(dir, s, StatusCode::kDataLoss, {"'b'", "truncated"});
}

TEST(SafetensorsBad, Overlap) {
  TempDir dir;
  expect_open_error(dir,
                    raw_safetensors(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                                        "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
                                    12),
                    StatusCode::kDataLoss, {"'b'", "overlap", "'a'"});
  expect_open_error(dir,
                    raw_safetensors(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                                        "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})",
                                    8),
                    StatusCode::kDataLoss, {"overlap"});
}

TEST(SafetensorsBad, HolesAndTrailingBytes) {
  TempDir dir;
  expect_open_error(dir,
                    raw_safetensors(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                        "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})",
                                    12),
                    StatusCode::kDataLoss, {"'b'", "hole of 4 bytes"});
  expect_open_error(dir, raw_safetensors(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 6),
                    StatusCode::kDataLoss, {"2 trailing bytes", "'a'"});
  // Empty tensors occupy nothing and may sit anywhere in range.
  const auto p = dir / "ok.safetensors";
  write_bytes(p, raw_safetensors(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                     "e": {"dtype": "BF16", "shape": [0], "data_offsets": [2, 2]}})",
                                 4));
  EXPECT_TRUE(SafetensorsFile::open(p).ok());
}

TEST(SafetensorsBad, DuplicateTensor) {
  TempDir dir;
  expect_open_error(dir,
                    raw_safetensors(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                        "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                                    8),
                    StatusCode::kDataLoss, {"'a'", "twice"});
}

TEST(SafetensorsBad, HeaderPaddingWithSpacesIsFine) {
  TempDir dir;
  const auto p = dir / "pad.safetensors";
  write_bytes(p, raw_safetensors(std::string(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})") + "     ", 2));
  auto f = SafetensorsFile::open(p);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->find("a")->data[1], 1);
}

}  // namespace
}  // namespace pg
