// SafetensorsFileWriter: tensors written one at a time in any order give the file
// serialize_safetensors gives; a writer that does not finish leaves no file and no temporary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "tests/unit/formats/test_util.h"

namespace pg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> dir_entries(const std::filesystem::path& d) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Mixed element sizes, so that the data order (size descending, then name) differs from the list order.
struct Fixture {
  std::vector<uint8_t> a = test::iota_bytes(6, 1);    // U8 [2, 3]
  std::vector<uint8_t> b = test::iota_bytes(16, 50);  // F32 [2, 2]
  std::vector<uint8_t> c = test::iota_bytes(4, 100);  // BF16 [2]
  std::vector<uint8_t> s = test::iota_bytes(4, 200);  // F32 [] scalar
  std::vector<TensorToWrite> tensors() const {
    return {{"a.weight", DType::kU8, {2, 3}, a},
            {"b.weight", DType::kF32, {2, 2}, b},
            {"c.norm", DType::kBF16, {2}, c},
            {"a.weight_scale_2", DType::kF32, {}, s}};
  }
  std::vector<TensorSpec> specs() const {
    std::vector<TensorSpec> out;
    for (const TensorToWrite& t : tensors()) out.push_back({t.name, t.dtype, t.shape});
    return out;
  }
};

TEST(SafetensorsFileWriter, AnyWriteOrderGivesTheSerializedFile) {
  test::TempDir dir;
  Fixture fx;
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  auto want = serialize_safetensors(fx.tensors(), meta);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  const auto path = dir / "model.safetensors";
  auto w = SafetensorsFileWriter::create(path, fx.specs(), meta);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const auto ts = fx.tensors();
  for (size_t i : {2u, 0u, 3u, 1u}) ASSERT_TRUE(w->write(ts[i].name, ts[i].data).ok()) << ts[i].name;
  EXPECT_FALSE(std::filesystem::exists(path)) << "visible before finish()";
  ASSERT_TRUE(w->finish().ok());
  EXPECT_EQ(read_bytes(path), *want);
  EXPECT_THAT(dir_entries(dir.path()), ElementsAre("model.safetensors"));
  auto f = SafetensorsFile::open(path);  // and our reader takes it
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->find("a.weight_scale_2")->shape, std::vector<int64_t>{});
}

TEST(SafetensorsFileWriter, UnfinishedWriterLeavesNothing) {
  test::TempDir dir;
  Fixture fx;
  const auto path = dir / "model.safetensors";
  {
    auto w = SafetensorsFileWriter::create(path, fx.specs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write("a.weight", fx.a).ok());
    EXPECT_EQ(dir_entries(dir.path()).size(), 1u);  // the temporary file
  }
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

TEST(SafetensorsFileWriter, RejectsBadWrites) {
  test::TempDir dir;
  Fixture fx;
  const auto path = dir / "model.safetensors";
  auto w = SafetensorsFileWriter::create(path, fx.specs());
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->write("nope", fx.a).message(), HasSubstr("'nope' is not in the layout"));
  EXPECT_THAT(w->write("b.weight", fx.a).message(), HasSubstr("needs 16 bytes, got 6"));
  ASSERT_TRUE(w->write("a.weight", fx.a).ok());
  EXPECT_THAT(w->write("a.weight", fx.a).message(), HasSubstr("written twice"));
  const Status st = w->finish();
  EXPECT_THAT(st.message(), HasSubstr("was never written"));
  EXPECT_FALSE(std::filesystem::exists(path));
  auto dup = SafetensorsFileWriter::create(path, std::vector<TensorSpec>{{"x", DType::kU8, {1}}, {"x", DType::kU8, {1}}});
  EXPECT_THAT(dup.status().message(), HasSubstr("given twice"));
  auto no_dir = SafetensorsFileWriter::create(dir / "no_such_dir" / "x.safetensors", fx.specs());
  EXPECT_FALSE(no_dir.ok());
  EXPECT_THAT(no_dir.status().message(), HasSubstr("no_such_dir"));
}

}  // namespace
}  // namespace pg
