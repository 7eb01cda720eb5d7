// ModelRunner::draft_chain's default: the MTP catch-up pass, then one forward_mtp per draft depth
// with the drafts picked on the host in between (the CPU runner's drafting, and any runner's
// fallback).
#include "model/model_runner.h"

#include <algorithm>

namespace pg {

Status ModelRunner::draft_chain(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                                std::span<const DraftRow> rows, DraftPicker& picker, DraftOutput& out) {
  const int64_t vocab = config().vocab_size, H = config().hidden_size;
  out.tokens.assign(rows.size(), {});
  out.logits.assign(rows.size(), {});
  StepOutput mo;
  PG_TRY(forward_mtp(mtp_idx, seqs, prev_hidden, mo));
  if (size_t(mo.n_rows) != rows.size())
    return invalid_argument("draft_chain: {} rows for {} output rows of the catch-up pass", rows.size(), mo.n_rows);
  auto keep = [&](size_t i, std::span<const float> logits) {
    out.tokens[i].push_back(picker.pick(i, int64_t(out.tokens[i].size()), logits));
    if (rows[i].want_logits) out.logits[i].insert(out.logits[i].end(), logits.begin(), logits.end());
  };
  std::vector<size_t> live;  // rows that draft deeper
  std::vector<float> prev;   // [live, H] their MTP outputs
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].n_drafts <= 0) continue;
    keep(i, std::span<const float>(&mo.logits[i * size_t(vocab)], size_t(vocab)));
    if (rows[i].n_drafts > 1) {
      live.push_back(i);
      prev.insert(prev.end(), mo.hidden.begin() + int64_t(i) * H, mo.hidden.begin() + int64_t(i + 1) * H);
    }
  }
  for (int64_t depth = 1; !live.empty(); ++depth) {
    std::vector<SeqStep> ds;
    for (size_t i : live) {
      SeqStep s;
      s.tokens = std::span<const int32_t>(&out.tokens[i].back(), 1);
      s.start_pos = rows[i].last_pos + depth - 1;  // the draft is the token at last_pos + depth
      s.block_table = rows[i].block_table;
      ds.push_back(s);
    }
    StepOutput dm;
    if (!forward_mtp(mtp_idx, ds, prev, dm).ok()) break;  // speculation is an optimisation: stop here
    std::vector<size_t> next;
    std::vector<float> next_prev;
    for (size_t j = 0; j < live.size(); ++j) {
      const size_t i = live[j];
      keep(i, std::span<const float>(&dm.logits[j * size_t(vocab)], size_t(vocab)));
      if (int64_t(out.tokens[i].size()) < rows[i].n_drafts) {
        next.push_back(i);
        next_prev.insert(next_prev.end(), dm.hidden.begin() + int64_t(j) * H, dm.hidden.begin() + int64_t(j + 1) * H);
      }
    }
    live.swap(next);
    prev.swap(next_prev);
  }
  return ok_status();
}

}  // namespace pg
