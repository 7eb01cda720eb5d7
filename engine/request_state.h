// RequestState: the engine's per-request bookkeeping — the scheduler's Sequence, the seed and
// penalty history for sampling, the incremental detokenizer and the stop checker — and the one
// place where a sampled token becomes an event.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/adaptive_depth.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pg {

struct RequestState {
  RequestState(GenerationRequest request, EventSink event_sink, const Tokenizer& tokenizer, int64_t max_model_len);

  GenerationRequest req;
  EventSink sink;
  Sequence seq;
  uint64_t seed = 0;
  bool queued = false;    // handed to the scheduler
  bool finished = false;  // the final event was sent

  int64_t n_generated() const { return int64_t(seq.tokens.size()) - seq.n_prompt; }
  const TokenHistory* history() const { return history_ ? &*history_ : nullptr; }
  RngPosition rng_position() const { return {seed, req.choice_idx, n_generated()}; }

  // Samples the next token from `logits` ([vocab] f32), appends it and adds it to `ev` (token,
  // logprobs, text that became safe). Returns the finish reason when the request is done.
  std::optional<std::string> sample_and_append(std::span<const float> logits, Sampler& sampler, GenerationEvent& ev);
  // Appends an already chosen token (speculative decoding) with its sampled record.
  std::optional<std::string> append(const SampledToken& tok, GenerationEvent& ev);
  // --- speculative decoding (MTP drafts) ---
  // Drafts proposed for the tokens after the last one; while a verify step is planned they are
  // also appended to seq.tokens (seq.n_drafts of them), so the scheduler computes them.
  std::vector<int32_t> drafts;
  std::vector<std::vector<WeightedToken>> draft_dists;  // sampling: the distribution each was drawn from
  int64_t n_drafted = 0, n_accepted = 0, n_verify_steps = 0;
  AdaptiveDepth depth;  // the draft depth in adaptive mode (EngineConfig::speculative_adaptive)
  // Removes planned drafts from seq.tokens (after a partial schedule or a preemption).
  void strip_drafts();
  // Draws a draft for depth `depth` (0-based) from MTP logits.
  int32_t draw_draft(std::span<const float> mtp_logits, Sampler& sampler, int64_t depth);
  // Verifies drafts[0..n) against the target rows ([n + 1, vocab]): appends the accepted drafts
  // and one more token (greedy: the target's argmax; sampling: speculative sampling, so the output
  // distribution is exactly the target's). Returns the finish reason when the request ended.
  std::optional<std::string> verify(std::span<const float> rows, int64_t vocab, Sampler& sampler,
                                    GenerationEvent& ev, int64_t* n_accepted_out);
  // The same for a greedy request without penalties whose target rows were drawn on the device
  // (DeviceSampler::sample: the argmax of each row, with its logprobs): targets[n + 1].
  std::optional<std::string> verify_greedy(std::span<const SampledToken> targets, GenerationEvent& ev,
                                           int64_t* n_accepted_out);

  // The text still held back when the request ends for a reason other than a stop
  // ("length", "abort", "error").
  std::string flush_text();

 private:
  // A verify step's start: takes the drafts (and clears their distributions), counts the step.
  std::vector<int32_t> begin_verify(int64_t* n_accepted_out);
  // Greedy verification: target(i) is row i's token; appends while the drafts match, then the
  // target's token at the first mismatch (or after the last draft).
  template <typename Target>
  std::optional<std::string> accept_greedy(const std::vector<int32_t>& d, Target&& target, GenerationEvent& ev,
                                           int64_t* n_accepted_out);
  IncrementalDetokenizer detok_;
  StopChecker stop_;
  std::optional<TokenHistory> history_;
};

}  // namespace pg
