// RequestState implementation.
#include "engine/request_state.h"

#include "engine/device_sampler.h"

namespace pg {
namespace {
std::vector<int32_t> eos_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (auto e = tok.eos_id()) ids.push_back(*e);
  return ids;
}
}  // namespace

RequestState::RequestState(GenerationRequest request, EventSink event_sink, const Tokenizer& tokenizer,
                           int64_t max_model_len)
    : req(std::move(request)),
      sink(std::move(event_sink)),
      detok_(tokenizer, req.skip_special_tokens),
      stop_(req.params, eos_ids(tokenizer), max_model_len - int64_t(req.prompt_ids.size())) {
  seq.tokens = req.prompt_ids;
  seq.n_prompt = int64_t(req.prompt_ids.size());
  seq.owner = this;
  seed = resolve_seed(req.params);
  if (req.params.has_penalties()) history_.emplace(req.prompt_ids);
}

std::optional<std::string> RequestState::append(const SampledToken& tok, GenerationEvent& ev) {
  seq.tokens.push_back(tok.token_id);
  if (history_) history_->add_output(tok.token_id);
  ev.token_ids.push_back(tok.token_id);
  if (req.params.logprobs) ev.logprobs.push_back({tok.token_id, tok.logprob, tok.top_logprobs});
  Result<std::string> delta = detok_.push(tok.token_id);
  if (!delta.ok()) {
    ev.error = delta.status();
    return std::string("error");
  }
  StopUpdate u = stop_.on_token(tok.token_id, *delta);
  ev.text += u.text;
  if (u.finish == FinishReason::kNone) return std::nullopt;
  if (u.finish == FinishReason::kLength) {
    // The token limit: the bytes the detokenizer still holds (an incomplete UTF-8 sequence,
    // shown as U+FFFD as HF decode does) end the text; the checker already released its own.
    ev.text += detok_.flush();
  }
  ev.stop_string = u.stop_string;
  return std::string(finish_reason_name(u.finish));
}

std::optional<std::string> RequestState::sample_and_append(std::span<const float> logits, Sampler& sampler,
                                                           GenerationEvent& ev) {
  return append(sampler.sample(logits, req.params, rng_position(), history()), ev);
}

std::string RequestState::flush_text() {
  if (stop_.finished()) return {};
  std::string text = stop_.on_text(detok_.flush()).text;
  return text + stop_.flush();
}

}  // namespace pg

// ---- speculative decoding -------------------------------------------------------------------
namespace pg {
namespace {

// Sub-streams of the request's Philox counter (sampling_math.h) for speculation.
constexpr uint32_t kStreamDraft = 1;     // + depth: drawing draft tokens from the MTP head
constexpr uint32_t kStreamAccept = 16;   // the accept/reject test of a draft
constexpr uint32_t kStreamResidual = 17; // the draw from the residual distribution
static_assert(kStreamDraft == kDraftRngStream, "the GPU draft picker draws on the same sub-streams");

uint64_t philox_u64(uint64_t seed, int64_t output_idx, uint32_t choice, uint32_t stream) {
  return sampling::uniform_u64(sampling::philox4x32_10(sampling::rng_counter(output_idx, choice, stream),
                                                       sampling::rng_key(seed)));
}

double weight_of(std::span<const WeightedToken> dist, int32_t id, double* total) {
  double w = 0, z = 0;
  for (const WeightedToken& t : dist) {
    z += double(t.weight);
    if (t.token_id == id) w = double(t.weight);
  }
  *total = z;
  return w;
}

// The raw-logprob record of `id` under `row`, as Sampler::sample would have filled it.
SampledToken record(int32_t id, std::span<const float> row, const SamplingParams& p) {
  SampledToken t;
  t.token_id = id;
  if (p.logprobs) {
    const std::vector<float> lp = log_softmax(row);
    t.logprob = lp[size_t(id)];
    for (int32_t j : top_k_ids(row, p.top_logprobs)) t.top_logprobs.emplace_back(j, lp[size_t(j)]);
  }
  return t;
}

}  // namespace

void RequestState::strip_drafts() {
  if (seq.n_drafts == 0) return;
  seq.tokens.resize(seq.tokens.size() - size_t(seq.n_drafts));
  seq.n_computed = std::min<int64_t>(seq.n_computed, int64_t(seq.tokens.size()) - 1);
  seq.n_drafts = 0;
  drafts.clear();
  draft_dists.clear();
}

int32_t RequestState::draw_draft(std::span<const float> mtp_logits, Sampler& sampler, int64_t depth) {
  if (req.params.is_greedy()) return sampler.sample(mtp_logits, req.params, rng_position(), history()).token_id;
  const auto dist = sampler.distribution(mtp_logits, req.params, history());
  draft_dists.emplace_back(dist.begin(), dist.end());
  const uint64_t u = philox_u64(seed, n_generated() + depth, req.choice_idx, kStreamDraft + uint32_t(depth));
  return draw_token(draft_dists.back(), u);
}

std::optional<std::string> RequestState::verify(std::span<const float> rows, int64_t vocab, Sampler& sampler,
                                                GenerationEvent& ev, int64_t* n_accepted_out) {
  const auto q = std::move(draft_dists);
  const std::vector<int32_t> d = begin_verify(n_accepted_out);
  const SamplingParams& p = req.params;
  auto row_at = [&](size_t i) { return rows.subspan(i * size_t(vocab), size_t(vocab)); };
  if (p.is_greedy())  // each row's token drawn as the history stands after the rows before it
    return accept_greedy(
        d, [&](size_t i) { return sampler.sample(row_at(i), p, rng_position(), history()); }, ev, n_accepted_out);
  for (size_t i = 0; i <= d.size(); ++i) {
    const std::span<const float> row = row_at(i);
    if (i == d.size()) return sample_and_append(row, sampler, ev);  // every draft accepted: one more
    // Speculative sampling: accept d with probability min(1, p(d) / q(d)), else draw from
    // norm(max(0, p - q)). Both distributions are the sampler's filtered weights.
    std::vector<WeightedToken> target;
    {
      const auto dist = sampler.distribution(row, p, history());
      target.assign(dist.begin(), dist.end());
    }
    double zp = 0, zq = 0;
    const double pd = weight_of(target, d[i], &zp) / std::max(zp, 1.0);
    const double qd = weight_of(q[i], d[i], &zq) / std::max(zq, 1.0);
    const uint64_t u = philox_u64(seed, n_generated(), req.choice_idx, kStreamAccept);
    const double uf = double(u >> 11) * 0x1p-53;  // uniform in [0, 1)
    if (qd > 0 && uf * qd < pd) {
      ++*n_accepted_out;
      ++n_accepted;
      if (auto reason = append(record(d[i], row, p), ev)) return reason;
      continue;
    }
    // Residual: r(x) = max(0, p(x) - q(x)) over the target's support, in fixed point.
    std::vector<WeightedToken> residual;
    residual.reserve(target.size());
    std::unordered_map<int32_t, double> qmap;
    for (const WeightedToken& t : q[i]) qmap[t.token_id] = double(t.weight) / std::max(zq, 1.0);
    for (const WeightedToken& t : target) {
      const double r = double(t.weight) / std::max(zp, 1.0) - (qmap.count(t.token_id) ? qmap[t.token_id] : 0.0);
      if (r > 0) residual.push_back({t.token_id, uint64_t(std::ldexp(r, 52))});
    }
    int32_t next;
    if (residual.empty()) {  // p == q up to rounding: the target itself
      next = draw_token(target, philox_u64(seed, n_generated(), req.choice_idx, kStreamResidual));
    } else {
      next = draw_token(residual, philox_u64(seed, n_generated(), req.choice_idx, kStreamResidual));
    }
    if (auto reason = append(record(next, row, p), ev)) return reason;
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<int32_t> RequestState::begin_verify(int64_t* n_accepted_out) {
  std::vector<int32_t> d = std::move(drafts);
  drafts.clear();
  draft_dists.clear();
  *n_accepted_out = 0;
  ++n_verify_steps;
  n_drafted += int64_t(d.size());
  return d;
}

template <typename Target>
std::optional<std::string> RequestState::accept_greedy(const std::vector<int32_t>& d, Target&& target,
                                                       GenerationEvent& ev, int64_t* n_accepted_out) {
  for (size_t i = 0; i <= d.size(); ++i) {
    const SampledToken t = target(i);
    const bool accepted = i < d.size() && t.token_id == d[i];
    if (accepted) ++*n_accepted_out, ++n_accepted;
    if (auto reason = append(t, ev)) return reason;
    if (!accepted) return std::nullopt;  // the first mismatch, or the token after the last draft
  }
  return std::nullopt;
}

std::optional<std::string> RequestState::verify_greedy(std::span<const SampledToken> targets, GenerationEvent& ev,
                                                       int64_t* n_accepted_out) {
  const std::vector<int32_t> d = begin_verify(n_accepted_out);
  if (targets.size() != d.size() + 1) {
    ev.error = internal_error("verify: {} target rows for {} drafts", targets.size(), d.size());
    return std::string("error");
  }
  return accept_greedy(d, [&](size_t i) { return targets[i]; }, ev, n_accepted_out);
}

}  // namespace pg
