// Scripted engine stand-in for server tests (see scripted_backend.h).
#include "tests/unit/server/scripted_backend.h"

#include "tokenizer/detokenizer.h"

namespace pg::server::testing {

std::string ScriptedBackend::script(std::string_view name) {
  if (name == "tool")
    return "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
           "{\"city\": \"Paris\", \"days\": [1, 2]}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
           "<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  if (name == "tool31")
    return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  if (name == "think") return "Let me think about 2+2.\nIt is 4.</think>\n\nThe answer is 4.";
  if (name == "long") {
    std::string s;
    for (int i = 0; i < 200; ++i) s += "word" + std::to_string(i) + " ";
    return s;
  }
  return "Hello from the scripted backend.";
}

ScriptedBackend::ScriptedBackend(std::shared_ptr<const Tokenizer> tokenizer, int64_t max_model_len,
                                 std::chrono::milliseconds step_time)
    : tokenizer_(std::move(tokenizer)), max_model_len_(max_model_len), step_time_(step_time) {
  stats_.kv_blocks_total = 1024;
  thread_ = std::thread([this] { loop(); });
}

ScriptedBackend::~ScriptedBackend() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<uint64_t> ScriptedBackend::submit(GenerationRequest req, EventSink sink) {
  const int64_t vocab = tokenizer_->vocab_size();
  if (req.prompt_ids.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= vocab) return invalid_argument("token id {} is outside the vocabulary [0, {})", id, vocab);
  PG_TRY(validate(req.params, vocab));
  const int64_t n_prompt = int64_t(req.prompt_ids.size());
  if (n_prompt >= max_model_len_) return out_of_range("the prompt has {} tokens; the context holds {}", n_prompt, max_model_len_);
  if (req.params.max_tokens && n_prompt + *req.params.max_tokens > max_model_len_)
    return out_of_range("prompt plus max_tokens is past the context of {} tokens", max_model_len_);

  // The script named after the last "SCRIPT:" in the prompt.
  std::string prompt = tokenizer_->decode(req.prompt_ids).ok() ? *tokenizer_->decode(req.prompt_ids) : "";
  std::string name;
  if (size_t p = prompt.rfind("SCRIPT:"); p != std::string::npos)
    for (size_t i = p + 7; i < prompt.size() && (std::isalnum(uint8_t(prompt[i])) || prompt[i] == '_'); ++i)
      name += prompt[i];
  EncodeOptions eo;
  eo.add_bos = false;
  eo.add_eos = false;
  auto ids = tokenizer_->encode(script(name), eo);
  if (!ids.ok()) return ids.status();
  Active a{std::move(req), std::move(sink), std::move(*ids), 0, false, name == "error" ? 3 : -1};
  if (tokenizer_->eos_id()) a.out.push_back(*tokenizer_->eos_id());
  std::lock_guard<std::mutex> lk(mu_);
  if (draining_) return failed_precondition("the server is shutting down and takes no new requests");
  const uint64_t id = next_id_++;
  active_.emplace(id, std::move(a));
  cv_.notify_all();
  return id;
}

void ScriptedBackend::cancel(uint64_t request_id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = active_.find(request_id); it != active_.end()) it->second.cancelled = true;
}

EngineStats ScriptedBackend::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = stats_;
  s.running = int64_t(active_.size());
  s.kv_blocks_used = s.running;
  s.kv_usage = double(s.kv_blocks_used) / double(s.kv_blocks_total);
  return s;
}

void ScriptedBackend::stop(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  draining_ = true;
  deadline_ = deadline;
  cv_.notify_all();
  cv_.wait(lk, [&] { return active_.empty(); });
}

void ScriptedBackend::loop() {
  std::map<uint64_t, IncrementalDetokenizer> detok;
  std::unique_lock<std::mutex> lk(mu_);
  while (!quit_) {
    if (active_.empty()) {
      cv_.notify_all();  // stop() waits for this
      cv_.wait(lk, [&] { return quit_ || !active_.empty(); });
      continue;
    }
    const bool past_deadline = draining_ && std::chrono::steady_clock::now() >= deadline_;
    std::vector<std::pair<EventSink, GenerationEvent>> events;
    for (auto it = active_.begin(); it != active_.end();) {
      Active& a = it->second;
      GenerationEvent ev;
      ev.prompt_tokens = int64_t(a.req.prompt_ids.size());
      auto d = detok.try_emplace(it->first, *tokenizer_, /*skip_special_tokens=*/true).first;
      if (a.cancelled || past_deadline) {
        ev.finished = true;
        ev.finish_reason = "abort";
      } else if (a.fail_at >= 0 && int64_t(a.pos) == a.fail_at) {
        ev.finished = true;
        ev.finish_reason = "error";
        ev.error = internal_error("scripted failure after {} tokens", a.pos);
      } else {
        const int32_t tok = a.out[a.pos++];
        const bool eos = a.pos == a.out.size();
        ev.token_ids = {tok};
        if (a.req.params.logprobs) {
          TokenLogprob lp{tok, -0.25f, {}};
          for (int64_t k = 0; k < a.req.params.top_logprobs; ++k)
            lp.top.emplace_back(int32_t((tok + k) % tokenizer_->vocab_size()), -0.25f - float(k));
          ev.logprobs.push_back(std::move(lp));
        }
        if (!eos) {
          auto text = d->second.push(tok);
          ev.text = text.ok() ? *text : "";
        }
        const bool length = a.req.params.max_tokens && int64_t(a.pos) >= *a.req.params.max_tokens;
        if (eos || length) {
          ev.text += d->second.flush();
          ev.finished = true;
          ev.finish_reason = eos ? "stop" : "length";
        }
        ++stats_.generation_tokens_total;
      }
      ev.completion_tokens = int64_t(a.pos);
      const bool done = ev.finished;
      events.emplace_back(done ? std::move(a.sink) : a.sink, std::move(ev));
      if (done) {
        ++stats_.requests_finished_total;
        detok.erase(it->first);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    ++stats_.steps_total;
    lk.unlock();
    for (auto& [sink, ev] : events) sink(std::move(ev));
    std::this_thread::sleep_for(step_time_);
    lk.lock();
  }
}

}  // namespace pg::server::testing
