// RequestState implementation.
#include "engine/request_state.h"

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
