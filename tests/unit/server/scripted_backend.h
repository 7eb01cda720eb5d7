// A stand-in for the engine in server tests: it "generates" a scripted text chosen by a
// `SCRIPT:name` marker in the prompt, one token per step on its own thread, with Engine's
// submit/cancel/stop contract. It drives tool-call and reasoning output (which a random-weight
// model never writes) through the real HTTP server and protocol code. Script "error" fails
// mid-generation (finish_reason "error"), as a sticky device error would.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "server/backend.h"
#include "tokenizer/tokenizer.h"

namespace pg::server::testing {

class ScriptedBackend final : public GenerationBackend {
 public:
  ScriptedBackend(std::shared_ptr<const Tokenizer> tokenizer, int64_t max_model_len,
                  std::chrono::milliseconds step_time);
  ~ScriptedBackend() override;

  Result<uint64_t> submit(GenerationRequest req, EventSink sink) override;
  void cancel(uint64_t request_id) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override { return max_model_len_; }
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  // Engine::stop's contract: no new requests; in-flight ones run until `deadline`, then abort.
  void stop(std::chrono::steady_clock::time_point deadline);

  // The text script `name` produces (the default one for unknown names).
  static std::string script(std::string_view name);

 private:
  struct Active {
    GenerationRequest req;
    EventSink sink;
    std::vector<int32_t> out;  // the scripted tokens (EOS last)
    size_t pos = 0;
    bool cancelled = false;
    int64_t fail_at = -1;  // script "error": the request fails after this many tokens
  };
  void loop();

  std::shared_ptr<const Tokenizer> tokenizer_;
  int64_t max_model_len_;
  std::chrono::milliseconds step_time_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Active> active_;
  uint64_t next_id_ = 1;
  bool draining_ = false, quit_ = false;
  std::chrono::steady_clock::time_point deadline_;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace pg::server::testing
