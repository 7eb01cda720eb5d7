// Scheduler implementation (policy described in scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>

namespace pg {

Status Scheduler::add(Sequence* seq) {
  if (blocks_.blocks_for(int64_t(seq->tokens.size()) + 1) > blocks_.n_blocks())
    return invalid_argument("the request needs {} KV blocks of {} tokens but the cache holds {} blocks",
                            blocks_.blocks_for(int64_t(seq->tokens.size()) + 1), blocks_.block_size(), blocks_.n_blocks());
  if (n_waiting() >= cfg_.max_waiting)
    return resource_exhausted("the server is at capacity ({} requests waiting); retry later", n_waiting());
  waiting_.push_back(seq);
  return ok_status();
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  blocks_.release(seq->block_table);
  seq->n_blocks_checked = 0;
}

void Scheduler::preempt(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_.release(seq->block_table);
  seq->n_blocks_checked = 0;
  seq->n_computed = 0;  // recomputed from scratch (prompt + generated so far) when readmitted
  ++seq->n_preemptions;
  waiting_.push_front(seq);
}

std::vector<ScheduledSeq> Scheduler::schedule(std::vector<Sequence*>* preempted) {
  std::vector<ScheduledSeq> step;
  int64_t budget = cfg_.max_num_batched_tokens;
  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t n = std::min(s->pending(), budget);
    // Blocks for the tokens computed this step (a decode step may open a new block).
    while (!blocks_.ensure(s->block_table, s->n_computed + n)) {
      Sequence* victim = running_.back();
      preempt(victim);
      if (preempted) preempted->push_back(victim);
      if (victim == s) break;
    }
    if (i >= running_.size() || running_[i] != s) continue;  // s itself was preempted
    step.push_back({s, s->n_computed, n, s->n_computed + n == int64_t(s->tokens.size())});
    budget -= n;
    ++i;
  }
  // 2. Waiting sequences, first come first served; admitted only when all their blocks exist. With
  // prefix caching, a sequence whose next block a running sequence is computing now (the same
  // leading tokens: the n choices of one prompt, a burst of requests with one system prompt) waits
  // for it to be published rather than computing it again; the sequences behind it go on.
  for (size_t w = 0; w < waiting_.size() && budget > 0 && n_running() < cfg_.max_num_seqs;) {
    Sequence* s = waiting_[w];
    // Cached leading blocks: at most the positions before the last final token, which must be
    // computed for its logits.
    const int64_t n_final = int64_t(s->tokens.size()) - s->n_drafts;
    const bool fresh = s->n_computed == 0 && s->block_table.empty() && blocks_.prefix_caching();
    if (fresh) s->n_computed = blocks_.match(s->tokens, n_final - 1, s->block_table, s->block_hashes);
    if (fresh && being_computed(*s, n_final - 1)) {
      blocks_.release(s->block_table), s->n_computed = 0;
      ++w;
      continue;
    }
    if (blocks_.missing(s->block_table, int64_t(s->tokens.size())) > blocks_.n_free()) {
      if (fresh) blocks_.release(s->block_table), s->n_computed = 0;  // not admitted: let the blocks go
      break;
    }
    if (fresh) prefix_queries_ += n_final, prefix_hits_ += s->n_computed;
    blocks_.ensure(s->block_table, int64_t(s->tokens.size()));
    waiting_.erase(waiting_.begin() + std::ptrdiff_t(w));
    running_.push_back(s);
    const int64_t n = std::min(s->pending(), budget);
    step.push_back({s, s->n_computed, n, s->n_computed + n == int64_t(s->tokens.size())});
    budget -= n;
  }
  return step;
}

bool Scheduler::being_computed(const Sequence& s, int64_t max_tokens) const {
  // The block after s's cached ones, [m, m + B), and the lookahead token(s) its key covers.
  const int64_t end = s.n_computed + blocks_.block_size() + blocks_.lookahead();
  if (end > max_tokens) return false;  // s could not take it from the cache anyway
  for (const Sequence* r : running_) {
    const int64_t r_final = int64_t(r->tokens.size()) - r->n_drafts;
    if (r->n_computed >= end || r_final < end) continue;  // published by now, or r does not hold it
    if (std::equal(s.tokens.begin(), s.tokens.begin() + end, r->tokens.begin())) return true;
  }
  return false;
}

void Scheduler::commit(const std::vector<ScheduledSeq>& step) {
  for (const ScheduledSeq& s : step) s.seq->n_computed += s.n_new;
}

void Scheduler::publish(Sequence* seq, int64_t n_ready) {
  blocks_.publish(seq->tokens, n_ready, seq->block_table, seq->block_hashes, seq->n_blocks_checked);
}

}  // namespace pg
