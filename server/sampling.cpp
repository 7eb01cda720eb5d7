// OpenAI/vLLM sampling fields -> SamplingParams (see sampling.h).
#include "server/sampling.h"

namespace pg::server {

// validate()'s messages start with the field they are about ("top_p must be ...",
// "stop[2] is empty"): that field becomes the error's `param`.
static std::string leading_field(const std::string& message) {
  size_t i = 0;
  while (i < message.size() && ((message[i] >= 'a' && message[i] <= 'z') || message[i] == '_')) ++i;
  return message.substr(0, i);
}

ApiResult<SamplingParams> to_sampling_params(const SamplingFields& f, int choice, int64_t vocab_size) {
  SamplingParams p;
  p.n = 1;  // one engine request per choice: the server submits n of them
  if (f.temperature) p.temperature = *f.temperature;
  if (f.top_p) p.top_p = *f.top_p;
  if (f.top_k) p.top_k = *f.top_k;
  if (f.min_p) p.min_p = *f.min_p;
  if (f.seed) p.seed = *f.seed + choice;
  p.max_tokens = f.max_tokens;
  p.stop = f.stop;
  p.stop_token_ids = f.stop_token_ids;
  p.ignore_eos = f.ignore_eos;
  if (f.presence_penalty) p.presence_penalty = *f.presence_penalty;
  if (f.frequency_penalty) p.frequency_penalty = *f.frequency_penalty;
  if (f.repetition_penalty) p.repetition_penalty = *f.repetition_penalty;
  if (f.n_logprobs >= 0) {
    p.logprobs = true;
    p.top_logprobs = f.n_logprobs;
  }
  if (Status st = validate(p, vocab_size); !st.ok()) {
    ApiError e = api_error(st);
    e.param = leading_field(st.message());
    return e;
  }
  return p;
}

}  // namespace pg::server
