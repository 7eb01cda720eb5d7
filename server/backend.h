// What the HTTP side needs from the engine, as an interface: the real Engine behind it in
// `peregrine serve`, a scripted stand-in in tests (to drive tool calls and reasoning markers
// through the whole server without a trained model).
#pragma once

#include <cstdint>

#include "engine/engine.h"

namespace pg::server {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Engine::submit's contract: validates synchronously, then events arrive on another thread.
  virtual Result<uint64_t> submit(GenerationRequest req, EventSink sink) = 0;
  virtual void cancel(uint64_t request_id) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual int64_t vocab_size() const = 0;
};

class EngineBackend final : public GenerationBackend {
 public:
  EngineBackend(Engine& engine, int64_t vocab_size) : engine_(engine), vocab_size_(vocab_size) {}
  Result<uint64_t> submit(GenerationRequest req, EventSink sink) override {
    return engine_.submit(std::move(req), std::move(sink));
  }
  void cancel(uint64_t request_id) override { engine_.cancel(request_id); }
  EngineStats stats() const override { return engine_.stats(); }
  int64_t max_model_len() const override { return engine_.max_model_len(); }
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  Engine& engine_;
  int64_t vocab_size_;
};

}  // namespace pg::server
