// The engine end to end on the golden models: greedy outputs through the scheduler equal
// transformers' — alone, with every prompt batched together under a small chunked-prefill
// budget, and with a KV pool too small for all (queueing and preemption); seeded sampling is
// reproducible; cancelled requests free their blocks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "engine/engine.h"
#include "model/deepseek_model.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pg {
namespace {

std::filesystem::path golden_dir(const std::string& name) {
  const auto root = std::filesystem::path(PG_SOURCE_DIR);
  if (name == "peregrine_tiny") return root / "models" / "peregrine-tiny";  // the embedded model
  return root / "tests" / "golden" / name;
}

std::filesystem::path expected_path(const std::string& name) {
  return std::filesystem::path(PG_SOURCE_DIR) / "tests" / "golden" / name / "expected.json";
}

// The first n tokens of a fixture's greedy continuation.
std::vector<int32_t> greedy_prefix(const nlohmann::json& prompt, size_t n) {
  auto g = prompt["greedy"].get<std::vector<int32_t>>();
  g.resize(std::min(n, g.size()));
  return g;
}

struct Fixture {
  nlohmann::json expected;
  std::unique_ptr<Engine> engine;
};

Fixture make(const std::string& name, EngineConfig cfg) {
  Fixture f;
  std::ifstream in(expected_path(name));
  f.expected = nlohmann::json::parse(in);
  auto model = DeepseekModel::load(golden_dir(name));
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  auto tok = Tokenizer::load(golden_dir(name));
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  auto e = Engine::create(std::move(model).value(), std::make_shared<Tokenizer>(std::move(tok).value()), cfg);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  f.engine = std::move(e).value();
  return f;
}

struct Collected {
  std::vector<int32_t> ids;
  std::string text, finish_reason;
  bool done = false;
};

GenerationRequest greedy_request(const nlohmann::json& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt_ids = prompt["ids"].get<std::vector<int32_t>>();
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;  // random weights: run the full length like the fixture
  return r;
}

uint64_t submit(Engine& e, GenerationRequest r, Collected& c) {
  auto id = e.submit(std::move(r), [&c](GenerationEvent&& ev) {
    c.ids.insert(c.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    c.text += ev.text;
    if (ev.finished) {
      c.done = true;
      c.finish_reason = ev.finish_reason;
    }
  });
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  return id.ok() ? *id : 0;
}

void run_until_idle(Engine& e) {
  for (int i = 0; i < 100000 && e.step(); ++i) {
  }
}

class EngineGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineGolden, GreedyAloneAndBatchedMatchTransformers) {
  EngineConfig one;
  one.scheduler.max_num_seqs = 1;
  Fixture f = make(GetParam(), one);
  for (const auto& p : f.expected["prompts"]) {
    Collected c;
    submit(*f.engine, greedy_request(p, 32), c);
    run_until_idle(*f.engine);
    ASSERT_TRUE(c.done);
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_EQ(c.ids, greedy_prefix(p, 32)) << p["text"];
  }
  // All prompts at once, prefill in chunks of 7 tokens next to the others' decode steps.
  EngineConfig many;
  many.scheduler.max_num_seqs = 8;
  many.scheduler.max_num_batched_tokens = 7;
  Fixture g = make(GetParam(), many);
  std::vector<Collected> cs(g.expected["prompts"].size());
  for (size_t i = 0; i < cs.size(); ++i) submit(*g.engine, greedy_request(g.expected["prompts"][i], 32), cs[i]);
  run_until_idle(*g.engine);
  for (size_t i = 0; i < cs.size(); ++i)
    EXPECT_EQ(cs[i].ids, greedy_prefix(g.expected["prompts"][i], 32)) << i;
  EXPECT_EQ(g.engine->stats().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineGolden,
                         ::testing::Values("v3_tiny", "v2_lite_tiny", "v3_odd_dims", "v3_tiny_fp8", "peregrine_tiny"),
                         [](const auto& info) { return std::string(info.param); });

// Speculative decoding with the MTP head is lossless: greedy outputs with k = 1, 2, 3 drafts are
// the outputs without speculation (the golden MTP weights are random, so most drafts are
// rejected: this checks the verify/rollback path), alone and with every prompt batched.
class EngineSpeculation : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineSpeculation, GreedyWithDraftsEqualsWithout) {
  for (int64_t k : {1, 2, 3}) {
    for (int64_t seqs : {1, 8}) {
      EngineConfig cfg;
      cfg.scheduler.max_num_seqs = seqs;
      cfg.scheduler.max_num_batched_tokens = 16;
      cfg.num_speculative_tokens = k;
      Fixture f = make(GetParam(), cfg);
      ASSERT_EQ(f.engine->stats().speculative_tokens, k);
      std::vector<Collected> cs(f.expected["prompts"].size());
      for (size_t i = 0; i < cs.size(); ++i) submit(*f.engine, greedy_request(f.expected["prompts"][i], 32), cs[i]);
      run_until_idle(*f.engine);
      for (size_t i = 0; i < cs.size(); ++i)
        EXPECT_EQ(cs[i].ids, greedy_prefix(f.expected["prompts"][i], 32))
            << GetParam() << " k=" << k << " seqs=" << seqs << " prompt " << i;
      const EngineStats st = f.engine->stats();
      EXPECT_GT(st.spec_draft_tokens_total, 0);
      if (std::string(GetParam()) == "peregrine_tiny") {
        // Trained MTP weights: drafts are accepted, so the accept and partial-accept paths ran.
        EXPECT_GT(st.spec_accepted_tokens_total, st.spec_draft_tokens_total / 5);
        std::printf("peregrine_tiny k=%lld seqs=%lld: %lld/%lld drafts accepted over %lld verify steps\n",
                    (long long)k, (long long)seqs, (long long)st.spec_accepted_tokens_total,
                    (long long)st.spec_draft_tokens_total, (long long)st.spec_verify_steps_total);
      }
      EXPECT_EQ(st.kv_blocks_used, 0);
    }
  }
}

// Adaptive depth (k chosen per step in 1..3 from each request's acceptance) is lossless too.
TEST_P(EngineSpeculation, AdaptiveDepthGreedyEqualsWithout) {
  for (int64_t seqs : {1, 8}) {
    EngineConfig cfg;
    cfg.scheduler.max_num_seqs = seqs;
    cfg.scheduler.max_num_batched_tokens = 16;
    cfg.num_speculative_tokens = 3;
    cfg.speculative_adaptive = true;
    cfg.speculative_draft_cost = 0.1;
    Fixture f = make(GetParam(), cfg);
    std::vector<Collected> cs(f.expected["prompts"].size());
    for (size_t i = 0; i < cs.size(); ++i) submit(*f.engine, greedy_request(f.expected["prompts"][i], 32), cs[i]);
    run_until_idle(*f.engine);
    for (size_t i = 0; i < cs.size(); ++i)
      EXPECT_EQ(cs[i].ids, greedy_prefix(f.expected["prompts"][i], 32)) << GetParam() << " seqs=" << seqs << " prompt " << i;
    const EngineStats st = f.engine->stats();
    EXPECT_GT(st.spec_draft_tokens_total, 0);
    // Random MTP weights: acceptance collapses and the depth with it (fewer drafts per verify
    // step than the fixed k = 3 would make); the trained model keeps drafting deeper.
    const double per_step = double(st.spec_draft_tokens_total) / double(std::max<int64_t>(1, st.spec_verify_steps_total));
    if (std::string(GetParam()) != "peregrine_tiny") {
      EXPECT_LT(per_step, 2.0) << GetParam();
    }
    std::printf("%s adaptive seqs=%lld: %.2f drafts per verify step, %lld/%lld accepted\n", GetParam(), (long long)seqs,
                per_step, (long long)st.spec_accepted_tokens_total, (long long)st.spec_draft_tokens_total);
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineSpeculation,
                         ::testing::Values("v3_tiny", "v3_odd_dims", "v3_tiny_fp8", "peregrine_tiny"),
                         [](const auto& info) { return std::string(info.param); });

TEST(EngineScheduling, PreemptionAndQueueingKeepGreedyOutputs) {
  EngineConfig small;
  small.scheduler.max_num_seqs = 8;
  small.scheduler.max_num_batched_tokens = 64;
  small.kv_block_size = 4;
  small.kv_blocks = 40;  // 160 positions for five requests that need ~60-75 each
  Fixture f = make("v3_tiny", small);
  std::vector<Collected> cs(f.expected["prompts"].size());
  for (size_t i = 0; i < cs.size(); ++i) submit(*f.engine, greedy_request(f.expected["prompts"][i], 32), cs[i]);
  run_until_idle(*f.engine);
  const EngineStats st = f.engine->stats();
  EXPECT_GT(st.preemptions_total, 0) << "the test must exercise preemption";
  for (size_t i = 0; i < cs.size(); ++i) {
    ASSERT_TRUE(cs[i].done);
    EXPECT_EQ(cs[i].ids, f.expected["prompts"][i]["greedy"].get<std::vector<int32_t>>()) << i;
  }
  EXPECT_EQ(st.kv_blocks_used, 0);
}

// Prefix caching keeps every output. Requests that start as earlier ones did (the same prompt
// again, that prompt with its answer and a next turn, a prompt that shares only its first blocks)
// run one after another, so each finds the blocks the ones before published; their tokens and
// logprobs equal an engine's without the cache, greedy and seeded sampling, with and without
// speculation (the cache then holds MTP KV too). The cache must have served tokens.
TEST(EnginePrefixCache, SameTokensAndLogprobsAsWithout) {
  std::map<int64_t, int64_t> hits;
  for (int64_t k : {0, 2}) {
    struct Run {
      std::vector<std::vector<int32_t>> ids;
      std::vector<std::vector<float>> logprobs;
      EngineStats stats;
    };
    auto run = [&](bool cache) {
      EngineConfig cfg;
      cfg.kv_block_size = 8;
      cfg.scheduler.max_num_batched_tokens = 32;  // prompts in chunks
      cfg.num_speculative_tokens = k;
      cfg.enable_prefix_caching = cache;
      Fixture f = make("peregrine_tiny", cfg);
      std::vector<int32_t> base;
      for (const auto& p : f.expected["prompts"]) {
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        base.insert(base.end(), ids.begin(), ids.end());
      }
      Run out;
      // `choices` requests of one prompt submitted together (as a request with n = choices), run to
      // the end; returns the first's tokens.
      auto one = [&](std::vector<int32_t> prompt, double temperature, uint32_t choices = 1) {
        std::vector<Collected> cs(choices);
        std::vector<std::vector<float>> lps(choices);
        for (uint32_t i = 0; i < choices; ++i) {
          GenerationRequest r;
          r.prompt_ids = prompt;
          r.params.temperature = temperature;
          r.params.seed = 99;
          r.params.max_tokens = 20;
          r.params.ignore_eos = true;
          r.params.logprobs = 2;
          r.choice_idx = i;
          auto id = f.engine->submit(r, [&cs, &lps, i](GenerationEvent&& ev) {
            cs[i].ids.insert(cs[i].ids.end(), ev.token_ids.begin(), ev.token_ids.end());
            for (const TokenLogprob& t : ev.logprobs) lps[i].push_back(t.logprob);
            cs[i].done |= ev.finished;
          });
          EXPECT_TRUE(id.ok()) << id.status().to_string();
        }
        run_until_idle(*f.engine);
        for (uint32_t i = 0; i < choices; ++i) {
          EXPECT_TRUE(cs[i].done);
          out.ids.push_back(cs[i].ids);
          out.logprobs.push_back(lps[i]);
        }
        return cs[0].ids;
      };
      const std::vector<int32_t> first = one(base, 0.0);
      one(base, 0.8);  // the same prompt: every block but the last from the cache
      std::vector<int32_t> turn = base;  // the conversation goes on: prompt, answer, a new message
      turn.insert(turn.end(), first.begin(), first.end());
      turn.insert(turn.end(), base.begin(), base.begin() + 9);
      one(turn, 0.0);
      one(turn, 0.8);
      std::vector<int32_t> fork(base.begin(), base.begin() + 20);  // shares two blocks, then differs
      fork.insert(fork.end(), base.rbegin(), base.rend());
      one(fork, 0.8);
      // Differs right after a block: with speculation that block's last MTP entry, computed with
      // the next token of the prompt that published it, is not this prompt's (the lookahead key).
      std::vector<int32_t> edge(base.begin(), base.begin() + 24);
      edge.insert(edge.end(), base.begin(), base.begin() + 30);
      one(edge, 0.0);
      one(edge, 0.8);
      // Three choices of a new prompt at once: the first computes it, the others wait for its
      // blocks (Scheduler: a block another sequence is computing) and take them from the cache.
      std::vector<int32_t> fresh(base.rbegin(), base.rend());
      fresh.insert(fresh.end(), base.begin(), base.begin() + 11);
      one(fresh, 0.8, 3);
      out.stats = f.engine->stats();
      EXPECT_EQ(out.stats.kv_blocks_used, 0);
      return out;
    };
    const Run off = run(false), on = run(true);
    for (size_t i = 0; i < off.ids.size(); ++i) {
      EXPECT_EQ(on.ids[i], off.ids[i]) << "k=" << k << " request " << i;
      EXPECT_EQ(on.logprobs[i], off.logprobs[i]) << "k=" << k << " request " << i;
    }
    // The drafts too: the same MTP KV gives the same drafts, hence the same verify outcomes.
    EXPECT_EQ(on.stats.spec_draft_tokens_total, off.stats.spec_draft_tokens_total) << "k=" << k;
    EXPECT_EQ(on.stats.spec_accepted_tokens_total, off.stats.spec_accepted_tokens_total) << "k=" << k;
    EXPECT_EQ(off.stats.prefix_cache_hits_total, 0);
    EXPECT_GT(on.stats.prefix_cache_hits_total, 150) << "k=" << k;
    EXPECT_LT(on.stats.prompt_tokens_total, off.stats.prompt_tokens_total - 150) << "k=" << k;
    std::printf("k=%lld: prefix cache hits %lld of %lld prompt tokens looked up; computed %lld vs %lld\n", (long long)k,
                (long long)on.stats.prefix_cache_hits_total, (long long)on.stats.prefix_cache_queries_total,
                (long long)on.stats.prompt_tokens_total, (long long)off.stats.prompt_tokens_total);
    hits[k] = on.stats.prefix_cache_hits_total;
  }
  // With speculation a block is shared only when the token after it matches too: the prompts that
  // part right after a block (the edge ones) share one block less.
  EXPECT_LT(hits[2], hits[0]);
}

TEST(EngineSampling, SeededRequestsReproduceAndChoicesDiffer) {
  EngineConfig cfg;
  Fixture f = make("v3_tiny", cfg);
  auto req = [&](uint32_t choice) {
    GenerationRequest r;
    r.prompt_ids = f.expected["prompts"][0]["ids"].get<std::vector<int32_t>>();
    r.params.temperature = 1.0;
    r.params.seed = 1234;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.choice_idx = choice;
    return r;
  };
  Collected a, b, c;
  submit(*f.engine, req(0), a);
  submit(*f.engine, req(0), b);
  submit(*f.engine, req(1), c);
  run_until_idle(*f.engine);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids, c.ids);
  EXPECT_EQ(a.ids.size(), 24u);
}

TEST(EngineRequests, CancelFreesBlocksAndBadRequestsAreRejected) {
  EngineConfig cfg;
  Fixture f = make("v3_tiny", cfg);
  Collected c;
  const uint64_t id = submit(*f.engine, greedy_request(f.expected["prompts"][1], 200), c);
  for (int i = 0; i < 3; ++i) f.engine->step();
  EXPECT_GT(f.engine->stats().kv_blocks_used, 0);
  f.engine->cancel(id);
  run_until_idle(*f.engine);
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.finish_reason, "abort");
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);

  GenerationRequest empty;
  EXPECT_EQ(f.engine->submit(empty, nullptr).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest oov = greedy_request(f.expected["prompts"][0], 4);
  oov.prompt_ids.push_back(int32_t(f.engine->model().config().vocab_size));
  EXPECT_EQ(f.engine->submit(oov, nullptr).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest too_long = greedy_request(f.expected["prompts"][0], 4);
  too_long.prompt_ids.assign(size_t(f.engine->max_model_len()), 5);
  EXPECT_EQ(f.engine->submit(too_long, nullptr).status().code(), StatusCode::kOutOfRange);
  GenerationRequest past_ctx = greedy_request(f.expected["prompts"][0], f.engine->max_model_len());
  EXPECT_EQ(f.engine->submit(past_ctx, nullptr).status().code(), StatusCode::kOutOfRange);
  GenerationRequest bad_temp = greedy_request(f.expected["prompts"][0], 4);
  bad_temp.params.temperature = -1;
  EXPECT_EQ(f.engine->submit(bad_temp, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineThread, StartSubmitStopDrains) {
  EngineConfig cfg;
  Fixture f = make("v3_tiny", cfg);
  f.engine->start();
  std::mutex mu;
  std::condition_variable cv;
  Collected c;
  bool done = false;
  auto r = greedy_request(f.expected["prompts"][0], 32);
  auto id = f.engine->submit(r, [&](GenerationEvent&& ev) {
    std::lock_guard<std::mutex> lk(mu);
    c.ids.insert(c.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) {
      done = true;
      cv.notify_all();
    }
  });
  ASSERT_TRUE(id.ok());
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return done; }));
  }
  EXPECT_EQ(c.ids, f.expected["prompts"][0]["greedy"].get<std::vector<int32_t>>());
  f.engine->stop(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(f.engine->submit(r, nullptr).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pg
