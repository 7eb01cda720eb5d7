// Scheduler: continuous batching over a bounded KV-block pool (the policy in one place).
// Each step: running sequences first (a decode token each, or the next chunk of a prefill),
// then waiting sequences in arrival order while the token budget, the sequence limit and the
// free blocks allow. A sequence is admitted only when blocks for all its tokens exist; when a
// running sequence cannot get a block for its next token, the newest running sequence is
// preempted (its blocks freed; it goes back to the front of the queue and is recomputed).
// With prefix caching (BlockManager), an admitted sequence first takes the published blocks that
// hold its leading tokens and computes from there; publish() offers the blocks a step completed;
// a waiting sequence whose next block a running one is computing waits for it (others go ahead).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/status.h"
#include "engine/block_manager.h"

namespace pg {

// The scheduler's view of one sequence.
struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;   // prompt followed by generated tokens
  int64_t n_prompt = 0;
  int64_t n_computed = 0;        // leading tokens whose KV is in the cache
  std::vector<int32_t> block_table;
  int64_t n_preemptions = 0;
  int64_t n_drafts = 0;          // trailing tokens that are drafts (speculative decoding), not yet final
  void* owner = nullptr;         // the engine's per-request state
  // Prefix caching (BlockManager::match / publish): the memo of its blocks' keys, and how many
  // leading blocks of block_table publish() has looked at.
  std::vector<uint64_t> block_hashes;
  int64_t n_blocks_checked = 0;

  int64_t pending() const { return int64_t(tokens.size()) - n_computed; }
};

struct SchedulerConfig {
  int64_t max_num_seqs = 64;            // running at once
  int64_t max_num_batched_tokens = 512; // new tokens per step (the chunked-prefill budget)
  int64_t max_waiting = 1024;           // queue bound: more is a ResourceExhausted (HTTP 429)
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t start = 0;    // first token to compute (== seq->n_computed)
  int64_t n_new = 0;    // tokens to compute this step
  bool sample = false;  // true when this step completes the sequence's tokens: sample the next
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, BlockManager& blocks) : cfg_(cfg), blocks_(blocks) {}

  // Queues a sequence; ResourceExhausted when the queue is full, InvalidArgument when it could
  // never fit (more blocks than the whole pool).
  Status add(Sequence* seq);
  // Removes a sequence wherever it is and frees its blocks.
  void remove(Sequence* seq);
  // Plans one step. Sequences preempted while planning are listed in `preempted`.
  std::vector<ScheduledSeq> schedule(std::vector<Sequence*>* preempted = nullptr);
  // After the step ran: marks the computed tokens.
  void commit(const std::vector<ScheduledSeq>& step);
  // Offers the sequence's blocks whose KV is final to the prefix cache: the blocks within its
  // first n_ready tokens (the caller knows how many are final: computed and not drafts, and for
  // the MTP KV, followed by a known token).
  void publish(Sequence* seq, int64_t n_ready);

  // Prefix caching counters: prompt positions looked up at admission, and those found cached.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

  int64_t n_running() const { return int64_t(running_.size()); }
  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  void preempt(Sequence* seq);
  // Whether a running sequence is computing the block after s's cached prefix (s.n_computed), with
  // the same tokens up to that block's key end (<= max_tokens), not yet published.
  bool being_computed(const Sequence& s, int64_t max_tokens) const;

  SchedulerConfig cfg_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order: the back is the newest
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace pg
