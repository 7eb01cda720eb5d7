// Engine implementation: the step loop (schedule -> forward -> sample -> stream) over the
// scheduler, the KV block pool and a ModelRunner (CPU or CUDA), with thread-safe submit/cancel.
#include "engine/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.h"
#include "engine/block_manager.h"
#include "engine/device_sampler.h"
#include "engine/request_state.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pg {

using Clock = std::chrono::steady_clock;

struct Engine::Impl {
  std::unique_ptr<ModelRunner> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  EngineConfig cfg;
  int64_t max_model_len = 0;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<Scheduler> scheduler;
  Sampler sampler;  // engine thread only
  int64_t spec_k = 0;  // draft depth (0: no speculation)
  double draft_cost = 0.25;  // the adaptive depth's cost of one more draft (EngineConfig::speculative_draft_cost)

  // Shared with other threads, under mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<RequestState>> incoming;
  std::vector<uint64_t> cancels;
  uint64_t next_id = 1;
  bool draining = false;
  Clock::time_point drain_deadline;
  EngineStats stats;
  int64_t n_active = 0;  // submitted and not finished

  // Engine thread only.
  std::map<uint64_t, std::unique_ptr<RequestState>> active;
  std::thread thread;

  bool step();
  bool step_inner();
  // Runs the MTP head over the positions computed this step and draws each request's drafts.
  // steps[j] belongs to mtp_owner[j]; the sequences in `drafting` have one output row each.
  // False when the MTP pass failed (the step goes on without drafts).
  bool draft_next(std::vector<SeqStep>& steps, std::vector<float>& hidden, const std::vector<RequestState*>& mtp_owner,
                  const std::vector<RequestState*>& drafting);
  void refresh_gauges();  // running / waiting / KV usage into stats (takes mu)
  void mask_padding(std::vector<float>& logits) const;  // -inf for ids the tokenizer lacks
  void finish(RequestState& r, std::string reason, Status error = {});
  void emit(RequestState& r, GenerationEvent&& ev);
  void retire(RequestState& r);  // frees its blocks and updates the counters and gauges
  void loop();
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_ && impl_->thread.joinable()) stop(Clock::now());
}

int64_t Engine::default_kv_blocks(const ModelConfig& mc, const EngineConfig& cfg) {
  const int64_t len = cfg.max_model_len > 0 ? std::min(cfg.max_model_len, mc.max_position_embeddings)
                                            : mc.max_position_embeddings;
  if (cfg.kv_blocks > 0 || cfg.kv_block_size <= 0) return cfg.kv_blocks;
  return cfg.scheduler.max_num_seqs * ((len + cfg.kv_block_size - 1) / cfg.kv_block_size);
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<DeepseekModel> model,
                                               std::shared_ptr<const Tokenizer> tokenizer, EngineConfig cfg) {
  if (!model) return invalid_argument("engine: a model and a tokenizer are required");
  if (cfg.kv_block_size <= 0) return invalid_argument("engine: kv block size must be > 0, got {}", cfg.kv_block_size);
  cfg.kv_blocks = default_kv_blocks(model->config(), cfg);
  auto runner = std::make_unique<CpuRunner>(std::move(model), cfg.kv_blocks, cfg.kv_block_size);
  return create(std::move(runner), std::move(tokenizer), cfg);
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<ModelRunner> model,
                                               std::shared_ptr<const Tokenizer> tokenizer, EngineConfig cfg) {
  if (!model || !tokenizer) return invalid_argument("engine: a model and a tokenizer are required");
  auto impl = std::make_unique<Impl>();
  const ModelConfig& mc = model->config();
  impl->max_model_len = cfg.max_model_len > 0 ? std::min(cfg.max_model_len, mc.max_position_embeddings)
                                              : mc.max_position_embeddings;
  // The KV geometry is the runner's (a CUDA runner sizes its cache from GPU memory).
  cfg.kv_blocks = model->n_kv_blocks();
  cfg.kv_block_size = model->kv_block_size();
  if (cfg.kv_block_size <= 0 || cfg.kv_blocks <= 0)
    return invalid_argument("engine: the KV cache needs blocks (got {} of {} positions)", cfg.kv_blocks,
                            cfg.kv_block_size);
  if (cfg.scheduler.max_num_batched_tokens <= 0 || cfg.scheduler.max_num_seqs <= 0)
    return invalid_argument("engine: max_num_seqs and max_num_batched_tokens must be > 0");
  impl->pool = std::make_unique<ThreadPool>(cfg.n_threads);
  if (DeepseekModel* cpu = model->cpu_model()) cpu->set_thread_pool(impl->pool.get());
  if (cfg.num_speculative_tokens < 0 || cfg.num_speculative_tokens > kMaxSpeculativeTokens)
    return invalid_argument("speculative tokens must be in [0, {}], got {}", kMaxSpeculativeTokens,
                            cfg.num_speculative_tokens);
  impl->spec_k = model->n_mtp_layers() > 0 ? cfg.num_speculative_tokens : 0;
  // With speculation the cache holds MTP KV too, whose entry at a position depends on the next
  // token: a cached block's key then covers one token past it.
  impl->blocks = std::make_unique<BlockManager>(cfg.kv_blocks, cfg.kv_block_size, cfg.enable_prefix_caching,
                                                impl->spec_k > 0 ? 1 : 0);
  impl->scheduler = std::make_unique<Scheduler>(cfg.scheduler, *impl->blocks);
  impl->model = std::move(model);
  impl->tokenizer = std::move(tokenizer);
  impl->cfg = cfg;
  impl->stats.kv_blocks_total = cfg.kv_blocks;
  impl->draft_cost = cfg.speculative_draft_cost.value_or(impl->model->draft_cost_hint());
  if (!(impl->draft_cost >= 0.0 && impl->draft_cost <= 10.0))
    return invalid_argument("speculative draft cost must be in [0, 10] (a fraction of a decode step), got {}",
                            impl->draft_cost);
  impl->model->set_need_hidden_all(impl->spec_k > 0);
  impl->stats.speculative_tokens = impl->spec_k;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<uint64_t> Engine::submit(GenerationRequest req, EventSink sink) {
  Impl& m = *impl_;
  const int64_t vocab = m.model->config().vocab_size;
  if (req.prompt_ids.empty()) return invalid_argument("the prompt is empty: at least one token is needed");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= vocab) return invalid_argument("token id {} is outside the vocabulary [0, {})", id, vocab);
  PG_TRY(validate(req.params, vocab));
  const int64_t n_prompt = int64_t(req.prompt_ids.size());
  if (n_prompt >= m.max_model_len)
    return out_of_range("the prompt has {} tokens but the context holds {} (prompt plus at least one generated token)",
                        n_prompt, m.max_model_len);
  if (req.params.max_tokens && n_prompt + *req.params.max_tokens > m.max_model_len)
    return out_of_range("prompt ({} tokens) plus max_tokens ({}) is {}, past the context of {} tokens", n_prompt,
                        *req.params.max_tokens, n_prompt + *req.params.max_tokens, m.max_model_len);
  auto r = std::make_unique<RequestState>(std::move(req), std::move(sink), *m.tokenizer, m.max_model_len);
  std::lock_guard<std::mutex> lk(m.mu);
  if (m.draining) return failed_precondition("the server is shutting down and takes no new requests");
  if (int64_t(m.incoming.size()) + m.scheduler->n_waiting() >= m.cfg.scheduler.max_waiting)
    return resource_exhausted("the server is at capacity ({} requests waiting); retry later",
                              int64_t(m.incoming.size()) + m.scheduler->n_waiting());
  const uint64_t id = m.next_id++;
  r->seq.id = id;
  m.incoming.push_back(std::move(r));
  ++m.n_active;
  m.cv.notify_all();
  return id;
}

void Engine::cancel(uint64_t request_id) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->cancels.push_back(request_id);
  impl_->cv.notify_all();
}

void Engine::Impl::emit(RequestState& r, GenerationEvent&& ev) {
  ev.prompt_tokens = r.seq.n_prompt;
  ev.completion_tokens = r.n_generated();
  if (r.sink) r.sink(std::move(ev));
}

void Engine::Impl::finish(RequestState& r, std::string reason, Status error) {
  if (r.finished) return;
  r.finished = true;
  GenerationEvent ev;
  ev.text = r.flush_text();
  ev.finished = true;
  ev.finish_reason = std::move(reason);
  ev.error = std::move(error);
  retire(r);
  emit(r, std::move(ev));
}

void Engine::Impl::retire(RequestState& r) {
  // Blocks go back and the gauges show it before the final event leaves: a client that reads
  // /metrics right after its last token sees the pool as it is.
  scheduler->remove(&r.seq);
  std::lock_guard<std::mutex> lk(mu);
  ++stats.requests_finished_total;
  --n_active;
  stats.running = scheduler->n_running();
  stats.waiting = scheduler->n_waiting() + int64_t(incoming.size());
  stats.kv_blocks_used = blocks->n_used();
  stats.kv_usage = blocks->usage();
}

void Engine::Impl::mask_padding(std::vector<float>& logits) const {
  // Checkpoints pad lm_head past the tokenizer (DeepSeek-V3: 129280 rows, 128815 tokens): those
  // ids have no text and must never be sampled.
  const int64_t vocab = model->config().vocab_size, n_text = std::min<int64_t>(vocab, tokenizer->vocab_size());
  if (n_text == vocab) return;
  for (size_t r = 0; r < logits.size() / size_t(vocab); ++r)
    std::fill(logits.begin() + int64_t(r) * vocab + n_text, logits.begin() + int64_t(r + 1) * vocab,
              -std::numeric_limits<float>::infinity());
}

void Engine::Impl::refresh_gauges() {
  std::lock_guard<std::mutex> lk(mu);
  stats.running = scheduler->n_running();
  stats.waiting = scheduler->n_waiting() + int64_t(incoming.size());
  stats.kv_blocks_used = blocks->n_used();
  stats.kv_usage = blocks->usage();
}

bool Engine::Impl::step() {
  const bool busy = step_inner();
  refresh_gauges();
  return busy;
}

bool Engine::Impl::step_inner() {
  // 1. New requests and cancellations.
  std::vector<uint64_t> cancel_ids;
  bool abort_all = false;
  {
    std::lock_guard<std::mutex> lk(mu);
    while (!incoming.empty()) {
      auto r = std::move(incoming.front());
      incoming.pop_front();
      const uint64_t id = r->seq.id;
      active.emplace(id, std::move(r));
    }
    cancel_ids.swap(cancels);
    abort_all = draining && Clock::now() >= drain_deadline;
  }
  for (auto& [id, r] : active)
    if (!r->queued) {
      Status st = scheduler->add(&r->seq);
      if (!st.ok()) finish(*r, "error", st);
      r->queued = true;
    }
  const auto now = Clock::now();
  for (auto& [id, r] : active) {
    const bool cancelled = abort_all || std::find(cancel_ids.begin(), cancel_ids.end(), id) != cancel_ids.end();
    const bool expired = r->req.deadline && now >= *r->req.deadline;
    if (!r->finished && (cancelled || expired)) finish(*r, "abort");
  }
  std::erase_if(active, [](const auto& kv) { return kv.second->finished; });
  if (active.empty()) return false;

  // 2. Plan and run one forward step. Drafts from the MTP head ride along as extra tokens of
  // their sequence, so the scheduler budgets and allocates blocks for them.
  if (spec_k > 0)
    for (auto& [id, r] : active)
      if (!r->drafts.empty() && r->seq.n_drafts == 0) {
        r->seq.tokens.insert(r->seq.tokens.end(), r->drafts.begin(), r->drafts.end());
        r->seq.n_drafts = int64_t(r->drafts.size());
      }
  std::vector<Sequence*> preempted;
  std::vector<ScheduledSeq> plan = scheduler->schedule(&preempted);
  for (Sequence* s : preempted) static_cast<RequestState*>(s->owner)->strip_drafts();
  if (plan.empty()) return !active.empty();
  std::vector<SeqStep> steps;
  steps.reserve(plan.size());
  int64_t n_prompt_tokens = 0;
  for (const ScheduledSeq& p : plan) {
    const RequestState& r = *static_cast<const RequestState*>(p.seq->owner);
    SeqStep s;
    s.tokens = std::span<const int32_t>(p.seq->tokens).subspan(size_t(p.start), size_t(p.n_new));
    s.start_pos = p.start;
    s.block_table = p.seq->block_table;
    s.no_logits = !p.sample;
    s.all_logits = p.sample && r.seq.n_drafts > 0;  // verify: a row per draft, plus one
    steps.push_back(s);
    n_prompt_tokens += std::max<int64_t>(0, std::min(p.start + p.n_new, p.seq->n_prompt) - p.start);
  }
  // Sampling where the logits are (the GPU), verify rows too where the verification is greedy
  // without penalties (each row's argmax, as the host's verify draws it: ids and logprobs come
  // back, not (1 + drafts) vocabularies of logits); speculative sampling verifies on the host.
  bool dev_sample = cfg.device_sampler && model->device_logits();
  for (const ScheduledSeq& p : plan) {
    const RequestState& r = *static_cast<const RequestState*>(p.seq->owner);
    if (p.sample && r.seq.n_drafts > 0) dev_sample = dev_sample && r.req.params.is_greedy() && !r.req.params.has_penalties();
  }
  model->set_logits_to_host(!dev_sample);
  StepOutput out;
  Status st = model->forward(steps, out);
  scheduler->commit(plan);
  const int64_t vocab = model->config().vocab_size, H = model->config().hidden_size;
  std::vector<SampledToken> dev_tokens;
  if (st.ok() && dev_sample && !out.logits.empty()) {  // the runner brought them back after all (chunked rows)
    dev_sample = false;
  } else if (st.ok() && dev_sample) {
    std::vector<DeviceSampler::Row> rows;
    for (const ScheduledSeq& p : plan) {
      if (!p.sample) continue;
      const RequestState& r = *static_cast<const RequestState*>(p.seq->owner);
      for (int64_t i = 0; i <= r.seq.n_drafts; ++i)  // a verify row per draft, plus one (greedy: no RNG)
        rows.push_back({&r.req.params, r.rng_position(), r.history()});
    }
    // Ids past the tokenizer's vocabulary are padding: not candidates (as mask_padding's -inf).
    const int64_t n_text = std::min<int64_t>(vocab, tokenizer->vocab_size());
    st = cfg.device_sampler->sample(model->device_logits(), vocab, n_text, rows, model->device_stream(), dev_tokens);
  }
  if (!st.ok()) {  // a failed step ends every request in it with the error
    for (const ScheduledSeq& p : plan) finish(*static_cast<RequestState*>(p.seq->owner), "error", st);
    std::erase_if(active, [](const auto& kv) { return kv.second->finished; });
    return true;
  }

  // 3. Sample (or verify drafts), detokenize, check stops, stream. Collect the MTP inputs.
  if (!dev_sample) mask_padding(out.logits);
  int64_t row = 0, offset = 0, n_generated = 0, n_drafted = 0, n_accepted = 0, n_verify = 0;
  std::vector<SeqStep> mtp_steps;
  std::vector<float> mtp_hidden;
  std::vector<RequestState*> mtp_owner;  // the sequence of each MTP step
  std::vector<RequestState*> drafting;   // sequences whose MTP row yields a draft
  for (const ScheduledSeq& p : plan) {
    RequestState& r = *static_cast<RequestState*>(p.seq->owner);
    const int64_t off = offset;
    offset += p.n_new;
    int64_t n_valid = p.n_new;  // tokens of this step whose KV stays valid
    if (!p.sample) {
      if (r.seq.n_drafts > 0) {  // only part of a verify step fit the budget: drop the drafts
        r.strip_drafts();
        continue;
      }
    } else {
      GenerationEvent ev;
      std::optional<std::string> reason;
      const int64_t n_d = r.seq.n_drafts;
      if (n_d > 0) {
        const int64_t base = int64_t(r.seq.tokens.size()) - n_d;  // tokens before the drafts
        r.seq.tokens.resize(size_t(base));
        r.seq.n_drafts = 0;
        int64_t m = 0;
        reason = dev_sample ? r.verify_greedy(std::span(dev_tokens).subspan(size_t(row), size_t(n_d + 1)), ev, &m)
                            : r.verify(std::span<const float>(&out.logits[size_t(row * vocab)], size_t((n_d + 1) * vocab)),
                                       vocab, sampler, ev, &m);
        row += n_d + 1;
        r.seq.n_computed = base + m;  // KV of the rejected drafts is stale: rolled back
        r.depth.observe(n_d, m);
        n_valid = 1 + m;
        n_drafted += n_d;
        n_accepted += m;
        ++n_verify;
      } else if (dev_sample) {
        reason = r.append(dev_tokens[size_t(row)], ev);
        ++row;
      } else {
        reason = r.sample_and_append(std::span<const float>(&out.logits[size_t(row * vocab)], size_t(vocab)), sampler, ev);
        ++row;
      }
      n_generated += int64_t(ev.token_ids.size());
      if (reason) {
        ev.finished = true;
        ev.finish_reason = *reason;
        r.finished = true;
        // Its blocks stay for later requests; with speculation only those completed before this
        // step, whose MTP KV is written (none runs for a finished request).
        scheduler->publish(&r.seq, spec_k > 0 ? p.start : r.seq.n_computed);
        retire(r);
        emit(r, std::move(ev));
        continue;
      }
      if (!ev.token_ids.empty()) emit(r, std::move(ev));
    }
    if (spec_k == 0) continue;
    // MTP over the positions just computed: input at position q is (hidden at q, token q + 1).
    if (p.start + n_valid >= int64_t(r.seq.tokens.size())) continue;  // no next token known yet
    SeqStep m;
    m.tokens = std::span<const int32_t>(r.seq.tokens).subspan(size_t(p.start + 1), size_t(n_valid));
    m.start_pos = p.start;
    m.block_table = r.seq.block_table;
    m.no_logits = !p.sample;
    mtp_steps.push_back(m);
    mtp_owner.push_back(&r);
    mtp_hidden.insert(mtp_hidden.end(), out.hidden_all.begin() + off * H, out.hidden_all.begin() + (off + n_valid) * H);
    if (p.sample) drafting.push_back(&r);
  }
  if (!mtp_steps.empty() && !draft_next(mtp_steps, mtp_hidden, mtp_owner, drafting)) mtp_owner.clear();
  // The blocks this step completed go to the prefix cache: every computed position, except that
  // with speculation a position counts once the MTP pass has written its entry too (this step's
  // positions: when the MTP pass above took them).
  for (const ScheduledSeq& p : plan) {
    RequestState& r = *static_cast<RequestState*>(p.seq->owner);
    if (r.finished) continue;
    const bool mtp_done = spec_k == 0 || std::find(mtp_owner.begin(), mtp_owner.end(), &r) != mtp_owner.end();
    scheduler->publish(&r.seq, mtp_done ? r.seq.n_computed : std::min(p.start, r.seq.n_computed));
  }
  std::erase_if(active, [](const auto& kv) { return kv.second->finished; });
  {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.steps_total;
    stats.prompt_tokens_total += n_prompt_tokens;
    stats.generation_tokens_total += n_generated;
    stats.preemptions_total += int64_t(preempted.size());
    stats.prefix_cache_queries_total = scheduler->prefix_queries();
    stats.prefix_cache_hits_total = scheduler->prefix_hits();
    stats.spec_verify_steps_total += n_verify;
    stats.spec_draft_tokens_total += n_drafted;
    stats.spec_accepted_tokens_total += n_accepted;
  }
  return true;
}

namespace {

// The engine's draft choice: on the host, RequestState::draw_draft over the masked MTP logits
// (drawing from the sampler's filtered distribution on the draft sub-stream); on the device, the
// GPU sampler's draw of the same token (DeviceSampler::draft_picker).
class EngineDraftPicker final : public DraftPicker {
 public:
  EngineDraftPicker(const std::vector<RequestState*>& rows, Sampler& sampler,
                    const std::function<void(std::vector<float>&)>& mask, DeviceDraftPicker* device)
      : rows_(rows), sampler_(sampler), mask_(mask), device_(device) {}
  int32_t pick(size_t row, int64_t depth, std::span<const float> logits) override {
    scratch_.assign(logits.begin(), logits.end());
    mask_(scratch_);
    return rows_[row]->draw_draft(scratch_, sampler_, depth);
  }
  DeviceDraftPicker* device() override { return device_; }

 private:
  const std::vector<RequestState*>& rows_;
  Sampler& sampler_;
  const std::function<void(std::vector<float>&)>& mask_;
  DeviceDraftPicker* device_;
  std::vector<float> scratch_;
};

}  // namespace

bool Engine::Impl::draft_next(std::vector<SeqStep>& steps, std::vector<float>& hidden,
                              const std::vector<RequestState*>& mtp_owner, const std::vector<RequestState*>& drafting) {
  // How deep each drafting sequence drafts, decided before the chain runs: at most its depth k,
  // inside the context and max_tokens; depth d >= 1 writes the MTP KV at position last + d - 1
  // (model_runner.h, "Draft chains"), so its block must exist. Blocks are taken depth by depth in
  // row order, and a sequence that finds none stops there (what drafting one depth at a time did).
  std::vector<DraftRow> rows(drafting.size());
  std::vector<int64_t> cap(drafting.size(), 0);
  std::vector<size_t> live;
  for (size_t i = 0; i < drafting.size(); ++i) {
    RequestState& r = *drafting[i];
    r.drafts.clear();
    r.draft_dists.clear();
    // Verify positions run to last + n_drafts: keep them inside the context and max_tokens.
    const int64_t last = int64_t(r.seq.tokens.size()) - 1;
    const int64_t k = cfg.speculative_adaptive ? r.depth.choose(spec_k, draft_cost) : spec_k;
    cap[i] = std::min<int64_t>(k, max_model_len - 1 - last);
    if (r.req.params.max_tokens) cap[i] = std::min(cap[i], *r.req.params.max_tokens - r.n_generated() - 1);
    rows[i].last_pos = last;
    if (cap[i] <= 0) continue;
    rows[i].n_drafts = 1;
    if (cap[i] > 1) live.push_back(i);
  }
  for (int64_t depth = 1; depth < spec_k && !live.empty(); ++depth) {
    std::vector<size_t> next;
    for (size_t i : live) {
      RequestState& r = *drafting[i];
      if (!blocks->ensure(r.seq.block_table, rows[i].last_pos + depth)) continue;  // no room: stop here
      if (++rows[i].n_drafts < cap[i]) next.push_back(i);
    }
    live.swap(next);
  }
  // Block tables may have grown: every span into them is taken now.
  for (size_t j = 0; j < steps.size(); ++j) steps[j].block_table = mtp_owner[j]->seq.block_table;
  for (size_t i = 0; i < drafting.size(); ++i) rows[i].block_table = drafting[i]->seq.block_table;

  // On the device (GPU sampler) the chain never returns to the host between depths; sampled rows
  // bring their logits back so the host can rebuild each draft's distribution q for verify.
  DeviceDraftPicker* device = nullptr;
  if (cfg.device_sampler && model->device_logits()) {
    std::vector<DeviceSampler::Row> ds;
    for (RequestState* r : drafting) ds.push_back({&r->req.params, r->rng_position(), r->history()});
    const int64_t n_text = std::min<int64_t>(model->config().vocab_size, tokenizer->vocab_size());
    if (cfg.device_sampler->set_draft_rows(ds, n_text).ok()) device = cfg.device_sampler->draft_picker();
  }
  if (device)
    for (size_t i = 0; i < drafting.size(); ++i) rows[i].want_logits = !drafting[i]->req.params.is_greedy();
  const std::function<void(std::vector<float>&)> mask = [this](std::vector<float>& l) { mask_padding(l); };
  EngineDraftPicker picker(drafting, sampler, mask, device);
  DraftOutput out;
  if (Status st = model->draft_chain(0, steps, hidden, rows, picker, out); !st.ok()) {
    for (RequestState* r : drafting) r->drafts.clear(), r->draft_dists.clear();  // go on without drafts
    return false;
  }
  const int64_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    RequestState& r = *drafting[i];
    r.drafts = out.tokens[i];
    if (!device || r.req.params.is_greedy()) continue;  // the host picker recorded the distributions
    for (size_t d = 0; d < r.drafts.size(); ++d) {
      std::vector<float> row(out.logits[i].begin() + int64_t(d) * vocab, out.logits[i].begin() + int64_t(d + 1) * vocab);
      mask_padding(row);
      const auto dist = sampler.distribution(row, r.req.params, r.history());
      r.draft_dists.emplace_back(dist.begin(), dist.end());
    }
  }
  return true;
}

void Engine::Impl::loop() {
  for (;;) {
    const bool busy = step();
    std::unique_lock<std::mutex> lk(mu);
    if (draining && n_active == 0 && incoming.empty()) return;
    if (!busy && incoming.empty() && cancels.empty()) {
      if (draining)
        cv.wait_until(lk, drain_deadline);
      else
        cv.wait(lk, [&] { return !incoming.empty() || !cancels.empty() || draining; });
    }
  }
}

void Engine::start() {
  PG_CHECK(!impl_->thread.joinable(), "engine already started");
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void Engine::stop(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->draining = true;
    impl_->drain_deadline = deadline;
    impl_->cv.notify_all();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool Engine::step() { return impl_->step(); }
double Engine::speculative_draft_cost() const { return impl_->draft_cost; }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

const ModelRunner& Engine::model() const { return *impl_->model; }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
int64_t Engine::max_model_len() const { return impl_->max_model_len; }

}  // namespace pg
