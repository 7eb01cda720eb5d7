// Speculative sampling is exact: on the embedded model at temperature 1, the tokens drawn with MTP
// drafts (k = 2) follow the same distribution as without. Thousands of seeded requests generate 4 tokens each from one
// prompt; for each output position after the first, a two-sample chi-square test compares the
// token counts of both runs. A test that can fail: a biased acceptance rule or residual shows up
// as a p-value far below the threshold (the counts are large, so the test is sensitive).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>

#include "engine/engine.h"
#include "model/deepseek_model.h"
#include "tokenizer/tokenizer.h"

namespace pg {
namespace {

// Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a): series for x < a + 1, else the
// continued fraction (modified Lentz), both straight from their definitions.
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && term > sum * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefactor) * h;
}

// Two-sample chi-square over categories; categories with fewer than 10 pooled counts are merged.
double two_sample_p_value(const std::map<int32_t, int64_t>& a, const std::map<int32_t, int64_t>& b, int* dof_out) {
  double na = 0, nb = 0;
  for (auto& [k, v] : a) na += double(v);
  for (auto& [k, v] : b) nb += double(v);
  std::map<int32_t, std::pair<double, double>> cells;
  for (auto& [k, v] : a) cells[k].first += double(v);
  for (auto& [k, v] : b) cells[k].second += double(v);
  std::vector<std::pair<double, double>> bins;
  std::pair<double, double> other{0, 0};
  for (auto& [k, c] : cells) {
    if (c.first + c.second >= 10) bins.push_back(c);
    else other.first += c.first, other.second += c.second;
  }
  if (other.first + other.second > 0) bins.push_back(other);
  double chi2 = 0;
  for (auto& [x, y] : bins) {
    const double t = x + y;
    const double ea = t * na / (na + nb), eb = t * nb / (na + nb);
    chi2 += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  const int dof = int(bins.size()) - 1;
  *dof_out = dof;
  return dof > 0 ? gamma_q(dof / 2.0, chi2 / 2.0) : 1.0;
}

TEST(SpecSampling, ChiSquareHelperDetectsADifference) {
  std::map<int32_t, int64_t> a{{1, 5000}, {2, 5000}}, b{{1, 5300}, {2, 4700}}, c{{1, 5020}, {2, 4980}};
  int dof;
  EXPECT_LT(two_sample_p_value(a, b, &dof), 1e-4);
  EXPECT_GT(two_sample_p_value(a, c, &dof), 0.5);
  EXPECT_NEAR(gamma_q(1.0, 2.0), std::exp(-2.0), 1e-12);  // Q(1, x) = e^-x
}

std::vector<std::map<int32_t, int64_t>> sample_counts(const std::string& model_name, int64_t k, int n_requests,
                                                      int64_t n_tokens, int64_t* drafted, int64_t* accepted) {
  const auto root = std::filesystem::path(PG_SOURCE_DIR);
  const auto dir = model_name == "peregrine_tiny" ? root / "models" / "peregrine-tiny" : root / "tests" / "golden" / model_name;
  std::ifstream in(root / "tests" / "golden" / model_name / "expected.json");
  const auto expected = nlohmann::json::parse(in);
  auto model = DeepseekModel::load(dir);
  auto tok = Tokenizer::load(dir);
  EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 64;
  cfg.scheduler.max_num_batched_tokens = 1024;
  cfg.scheduler.max_waiting = 1 << 20;
  cfg.num_speculative_tokens = k;
  auto engine = Engine::create(std::move(model).value(), std::make_shared<Tokenizer>(std::move(tok).value()), cfg);
  EXPECT_TRUE(engine.ok());
  std::vector<std::map<int32_t, int64_t>> counts(static_cast<size_t>(n_tokens));
  std::vector<std::vector<int32_t>> outs(static_cast<size_t>(n_requests));
  for (int i = 0; i < n_requests; ++i) {
    GenerationRequest r;
    r.prompt_ids = expected["prompts"][0]["ids"].get<std::vector<int32_t>>();
    r.params.temperature = 1.0;
    r.params.seed = 1000003 * (k + 1) + i;  // independent draws in both runs
    r.params.max_tokens = n_tokens;
    r.params.ignore_eos = true;
    auto id = (*engine)->submit(r, [&outs, i](GenerationEvent&& ev) {
      outs[size_t(i)].insert(outs[size_t(i)].end(), ev.token_ids.begin(), ev.token_ids.end());
    });
    EXPECT_TRUE(id.ok());
  }
  while ((*engine)->step()) {
  }
  for (const auto& o : outs) {
    EXPECT_EQ(int64_t(o.size()), n_tokens);
    for (size_t j = 0; j < o.size(); ++j) ++counts[j][o[j]];
  }
  *drafted = (*engine)->stats().spec_draft_tokens_total;
  *accepted = (*engine)->stats().spec_accepted_tokens_total;
  return counts;
}

TEST(SpecSampling, DraftsDoNotChangeTheDistribution) {
  constexpr int kRequests = 6000;
  constexpr int64_t kTokens = 4;  // 24,000 sampled tokens per run
  int64_t d0, a0, d2, a2;
  // The embedded trained model: its MTP drafts are often accepted, so both the acceptance test and
  // the residual draw carry weight.
  const auto base = sample_counts("peregrine_tiny", 0, kRequests, kTokens, &d0, &a0);
  const auto spec = sample_counts("peregrine_tiny", 2, kRequests, kTokens, &d2, &a2);
  EXPECT_EQ(d0, 0);
  EXPECT_GT(d2, 0);
  EXPECT_GT(a2, d2 / 10);
  std::printf("speculation: %lld drafts, %lld accepted\n", (long long)d2, (long long)a2);
  for (int64_t j = 1; j < kTokens; ++j) {  // position 0 is drawn before any draft exists
    int dof = 0;
    const double p = two_sample_p_value(base[size_t(j)], spec[size_t(j)], &dof);
    std::printf("output position %lld: chi-square p = %.4f (%d degrees of freedom)\n", (long long)j, p, dof);
    EXPECT_GT(p, 0.01) << "position " << j;
  }
}

}  // namespace
}  // namespace pg
