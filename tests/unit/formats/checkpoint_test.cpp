// Checkpoint: single file, index + shards, a directory of shards without an index, and the
// broken-index cases (missing shard, tensor missing from its shard, tensor in two shards).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "tests/unit/formats/test_util.h"

namespace pg {
namespace {

using test::iota_bytes;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

const std::vector<uint8_t> kData = iota_bytes(8);

void write_shard(const std::filesystem::path& p, std::vector<std::string> names) {
  std::vector<TensorToWrite> ts;
  for (auto& n : names) ts.push_back({n, DType::kBF16, {4}, kData});
  ASSERT_TRUE(write_safetensors(p, ts).ok());
}

void write_index(const std::filesystem::path& dir, const std::string& weight_map_json) {
  write_bytes(dir / "model.safetensors.index.json",
              R"({"metadata": {"total_size": 32}, "weight_map": )" + weight_map_json + "}");
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  write_shard(dir / "model.safetensors", {"b", "a"});
  auto c = Checkpoint::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_tensors(), 2u);
  EXPECT_EQ(c->files().size(), 1u);
  auto all = c->all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->name, "a");
  EXPECT_EQ(all[1]->name, "b");
  auto a = c->get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->n_bytes, 8u);
  auto missing = c->get("zzz");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "tensor 'zzz' not found in " + dir.path().string());

  // A path to the file itself works too.
  auto f = Checkpoint::open(dir / "model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_NE(f->find("b"), nullptr);
}

TEST(Checkpoint, IndexAndShards) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {"model.embed_tokens.weight", "model.layers.0.w"});
  write_shard(dir / "model-00002-of-00002.safetensors", {"lm_head.weight"});
  write_index(dir.path(), R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                              "model.layers.0.w": "model-00001-of-00002.safetensors",
                              "lm_head.weight": "model-00002-of-00002.safetensors"})");
  auto c = Checkpoint::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_tensors(), 3u);
  EXPECT_EQ(c->files().size(), 2u);
  const TensorView* head = c->find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_THAT(*head->file, HasSubstr("model-00002-of-00002.safetensors"));
  // Views survive moving the Checkpoint.
  Checkpoint moved = std::move(c).value();
  EXPECT_EQ(moved.find("lm_head.weight"), head);
  EXPECT_EQ(moved.all().size(), 3u);
}

TEST(Checkpoint, DirectoryOfShardsWithoutIndex) {
  TempDir dir;
  write_shard(dir / "part-a.safetensors", {"x"});
  write_shard(dir / "part-b.safetensors", {"y"});
  write_bytes(dir / "README.md", "not a shard");
  auto c = Checkpoint::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_tensors(), 2u);
  EXPECT_EQ(c->files().size(), 2u);
}

TEST(CheckpointBad, MissingShardNamedInIndex) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_index(dir.path(), R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  auto c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("s2.safetensors"));
  EXPECT_THAT(c.status().message(), HasSubstr("'b'"));
  EXPECT_THAT(c.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST(CheckpointBad, TensorInIndexMissingFromShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_index(dir.path(), R"({"a": "s1.safetensors", "ghost": "s1.safetensors"})");
  auto c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("'ghost'"));
  EXPECT_THAT(c.status().message(), HasSubstr((dir / "s1.safetensors").string()));
}

TEST(CheckpointBad, DuplicateAcrossShards) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a", "dup"});
  write_shard(dir / "s2.safetensors", {"b", "dup"});
  write_index(dir.path(), R"({"a": "s1.safetensors", "b": "s2.safetensors", "dup": "s1.safetensors"})");
  auto c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("'dup'"));
  EXPECT_THAT(c.status().message(), HasSubstr("s1.safetensors"));
  EXPECT_THAT(c.status().message(), HasSubstr("s2.safetensors"));
  // Same without an index.
  std::filesystem::remove(dir / "model.safetensors.index.json");
  auto d = Checkpoint::open(dir.path());
  EXPECT_THAT(d.status().message(), HasSubstr("'dup'"));
}

TEST(CheckpointBad, BadShardPropagatesFileAndTensor) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_bytes(dir / "s2.safetensors", test::raw_safetensors(R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 4]}})", 4));
  write_index(dir.path(), R"({"a": "s1.safetensors", "w": "s2.safetensors"})");
  auto c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("s2.safetensors"));
  EXPECT_THAT(c.status().message(), HasSubstr("'w'"));
}

TEST(CheckpointBad, BadIndex) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_bytes(dir / "model.safetensors.index.json", "{not json");
  EXPECT_THAT(Checkpoint::open(dir.path()).status().message(), HasSubstr("not valid JSON"));
  write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(Checkpoint::open(dir.path()).status().message(), HasSubstr("weight_map"));
  write_index(dir.path(), R"({"a": 7})");
  EXPECT_THAT(Checkpoint::open(dir.path()).status().message(), HasSubstr("'a'"));
  write_index(dir.path(), R"({"a": "../s1.safetensors"})");
  EXPECT_THAT(Checkpoint::open(dir.path()).status().message(), HasSubstr("not a file inside"));
  write_index(dir.path(), R"({"a": "/etc/passwd"})");
  EXPECT_THAT(Checkpoint::open(dir.path()).status().message(), HasSubstr("not a file inside"));
}

TEST(CheckpointBad, NothingThere) {
  TempDir dir;
  auto e = Checkpoint::open(dir.path());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(e.status().message(), HasSubstr(dir.path().string()));
  auto m = Checkpoint::open(dir / "does_not_exist");
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("does_not_exist"));
}

// The golden fixtures (tests/golden/*/, written by transformers + safetensors through
// tools/golden.py) must open cleanly, and every tensor must be where config.json says.
TEST(Checkpoint, GoldenFixturesOpen) {
  const std::filesystem::path golden = std::filesystem::path(PG_SOURCE_DIR) / "tests/golden";
  if (!std::filesystem::exists(golden)) GTEST_SKIP() << "no tests/golden";
  int n_models = 0;
  for (const auto& e : std::filesystem::directory_iterator(golden)) {
    if (!std::filesystem::exists(e.path() / "config.json")) continue;
    ++n_models;
    auto cfg = load_model_config(e.path());
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    auto ck = Checkpoint::open(e.path());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    auto embed = ck->get("model.embed_tokens.weight");
    ASSERT_TRUE(embed.ok()) << embed.status().to_string();
    EXPECT_EQ((*embed)->shape, (std::vector<int64_t>{cfg->vocab_size, cfg->hidden_size})) << e.path();
    for (int64_t l = 0; l < cfg->num_hidden_layers; ++l) {
      const std::string gate = fmt::format("model.layers.{}.mlp.gate.weight", l);
      EXPECT_EQ(ck->find(gate) != nullptr, cfg->is_moe_layer(l)) << gate << " in " << e.path();
    }
  }
  EXPECT_GT(n_models, 0);
}

}  // namespace
}  // namespace pg
