// StopChecker implementation: one streaming KMP automaton per stop string (O(delta bytes x
// stop strings) per token); its state is also the length of text to hold back.
#include "engine/stop_checker.h"

#include <algorithm>

#include "core/check.h"

namespace pg {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kNone: break;
  }
  return "";
}

StopChecker::StopChecker(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
                         std::optional<int64_t> max_new_tokens) {
  for (const std::string& s : params.stop) {
    PG_CHECK(!s.empty(), "empty stop string (validate() rejects these)");
    Stop stop;
    stop.text = s;
    stop.fail.assign(s.size(), 0);
    for (size_t i = 1, k = 0; i < s.size(); ++i) {
      while (k > 0 && s[i] != s[k]) k = size_t(stop.fail[k - 1]);
      if (s[i] == s[k]) ++k;
      stop.fail[i] = int32_t(k);
    }
    stops_.push_back(std::move(stop));
  }
  stop_ids_ = params.stop_token_ids;
  if (!params.ignore_eos) stop_ids_.insert(stop_ids_.end(), eos_token_ids.begin(), eos_token_ids.end());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  limit_ = params.max_tokens;
  if (max_new_tokens) limit_ = limit_ ? std::min(*limit_, *max_new_tokens) : *max_new_tokens;
}

void StopChecker::scan(std::string_view delta, StopUpdate& out) {
  const size_t base = pending_.size();
  pending_.append(delta);
  for (size_t i = 0; i < delta.size(); ++i) {
    const char c = delta[i];
    const Stop* matched = nullptr;
    for (Stop& s : stops_) {
      auto k = size_t(s.state);
      while (k > 0 && s.text[k] != c) k = size_t(s.fail[k - 1]);
      if (s.text[k] == c) ++k;
      s.state = int32_t(k);
      if (k == s.text.size() && (!matched || s.text.size() > matched->text.size())) matched = &s;
    }
    if (matched) {
      // Ends at pending_[base + i]; it starts inside pending_ because its part before this delta
      // was a held-back prefix.
      const size_t start = base + i + 1 - matched->text.size();
      out.text.append(pending_, 0, start);
      out.finish = FinishReason::kStop;
      out.stop_string = matched->text;
      pending_.clear();
      finish_ = FinishReason::kStop;
      return;
    }
  }
  int32_t hold = 0;
  for (const Stop& s : stops_) hold = std::max(hold, s.state);
  const size_t n_emit = pending_.size() - size_t(hold);
  out.text.append(pending_, 0, n_emit);
  pending_.erase(0, n_emit);
}

StopUpdate StopChecker::on_token(int32_t token_id, std::string_view text_delta) {
  PG_CHECK(!finished(), "token {} after the request finished", token_id);
  StopUpdate out;
  ++n_tokens_;
  if (std::binary_search(stop_ids_.begin(), stop_ids_.end(), token_id)) {
    out.text = std::move(pending_);
    pending_.clear();
    out.finish = finish_ = FinishReason::kStop;
    out.stop_token_id = token_id;
    return out;
  }
  scan(text_delta, out);
  if (finish_ != FinishReason::kNone) return out;
  if (limit_ && n_tokens_ >= *limit_) {
    out.text += pending_;
    pending_.clear();
    out.finish = finish_ = FinishReason::kLength;
  }
  return out;
}

StopUpdate StopChecker::on_text(std::string_view text_delta) {
  StopUpdate out;
  if (flushed_ || finish_ == FinishReason::kStop) return out;
  if (finish_ == FinishReason::kLength) {
    out.text = text_delta;
    return out;
  }
  scan(text_delta, out);
  return out;
}

std::string StopChecker::flush() {
  flushed_ = true;
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

}  // namespace pg
