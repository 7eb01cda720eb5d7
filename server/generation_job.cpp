// Engine events -> OpenAI responses (see generation_job.h). The engine thread only queues
// events and wakes the connection; parsing and JSON building run on the connection's strand.
#include "server/generation_job.h"

#include <algorithm>
#include <random>

#include "server/sse.h"
#include "server/tokens.h"

namespace pg::server {

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), uint32_t(rng()));
}

GenerationJob::GenerationJob(JobOptions opts, GenerationBackend& backend, const Tokenizer& tokenizer,
                             ServerMetrics& metrics)
    : opts_(std::move(opts)), backend_(backend), tokenizer_(tokenizer), metrics_(metrics) {}

Status GenerationJob::submit(std::vector<ChoiceSetup> setups, std::vector<GenerationRequest> requests) {
  choices_.resize(setups.size());
  for (size_t k = 0; k < setups.size(); ++k) {
    Choice& c = choices_[k];
    c.setup = std::move(setups[k]);
    if (opts_.split_reasoning) c.reasoning = std::make_unique<ReasoningParser>(c.setup.starts_in_reasoning);
    if (opts_.parse_tools) c.tools = std::make_unique<ToolCallParser>(random_id("call_") + "_");
    if (opts_.n_logprobs >= 0)
      c.logprobs = opts_.chat ? json::array()
                              : json{{"tokens", json::array()},
                                     {"token_logprobs", json::array()},
                                     {"top_logprobs", json::array()},
                                     {"text_offset", json::array()}};
  }
  for (size_t k = 0; k < choices_.size(); ++k) {
    auto self = shared_from_this();
    Result<uint64_t> id =
        backend_.submit(std::move(requests[k]), [self, k](GenerationEvent&& ev) { self->on_event(k, std::move(ev)); });
    if (!id.ok()) {
      abandon();
      return id.status();
    }
    std::lock_guard<std::mutex> lk(mu_);
    choices_[k].engine_id = *id;
    choices_[k].submitted = true;
  }
  return ok_status();
}

void GenerationJob::on_event(size_t k, GenerationEvent&& ev) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Choice& c = choices_[k];
    if (!ev.token_ids.empty()) {
      const auto now = Clock::now();
      if (!c.got_token)
        metrics_.observe_time_to_first_token(std::chrono::duration<double>(now - arrival_).count());
      else
        metrics_.observe_inter_token_latency(std::chrono::duration<double>(now - c.last_token).count());
      c.got_token = true;
      c.last_token = now;
    }
    if (ev.finished) {
      c.finished = true;
      metrics_.request_finished(ev.finish_reason);
      metrics_.observe_request_latency(std::chrono::duration<double>(Clock::now() - arrival_).count());
    }
    queue_.push_back({k, std::move(ev)});
    wake = wake_;
  }
  if (wake) wake();
}

void GenerationJob::set_wake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lk(mu_);
  wake_ = std::move(wake);
}

void GenerationJob::abandon() {
  std::vector<uint64_t> to_cancel;
  {
    std::lock_guard<std::mutex> lk(mu_);
    abandoned_ = true;
    for (const Choice& c : choices_)
      if (c.submitted && !c.finished) to_cancel.push_back(c.engine_id);
  }
  for (uint64_t id : to_cancel) backend_.cancel(id);
}

// Logprobs cannot be -inf in JSON; like vLLM, report a very unlikely token as -9999.
static double finite_logprob(float lp) { return lp < -9999.0f ? -9999.0 : double(lp); }

static json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(int(ch));
  return b;
}

json GenerationJob::add_logprobs(Choice& c, const std::vector<TokenLogprob>& lps) {
  if (opts_.n_logprobs < 0 || lps.empty()) return nullptr;
  if (opts_.chat) {
    json entries = json::array();
    for (const TokenLogprob& t : lps) {
      const std::string raw = token_bytes(tokenizer_, t.token_id);
      json top = json::array();
      for (size_t i = 0; i < t.top.size() && int(i) < opts_.n_logprobs; ++i) {
        const std::string alt = token_bytes(tokenizer_, t.top[i].first);
        top.push_back({{"token", lossy_text(alt)}, {"logprob", finite_logprob(t.top[i].second)}, {"bytes", bytes_of(alt)}});
      }
      entries.push_back({{"token", lossy_text(raw)},
                         {"logprob", finite_logprob(t.logprob)},
                         {"bytes", bytes_of(raw)},
                         {"top_logprobs", std::move(top)}});
    }
    for (const json& e : entries) c.logprobs.push_back(e);
    return json{{"content", std::move(entries)}};
  }
  json part = {{"tokens", json::array()},
               {"token_logprobs", json::array()},
               {"top_logprobs", json::array()},
               {"text_offset", json::array()}};
  for (const TokenLogprob& t : lps) {
    const std::string s = lossy_text(token_bytes(tokenizer_, t.token_id));
    json top = json::object();
    for (size_t i = 0; i < t.top.size() && int(i) < opts_.n_logprobs; ++i)
      top[lossy_text(token_bytes(tokenizer_, t.top[i].first))] = finite_logprob(t.top[i].second);
    if (top.empty()) top[s] = finite_logprob(t.logprob);
    part["tokens"].push_back(s);
    part["token_logprobs"].push_back(finite_logprob(t.logprob));
    part["top_logprobs"].push_back(std::move(top));
    part["text_offset"].push_back(int64_t(c.text.size()));
  }
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& e : part[key]) c.logprobs[key].push_back(e);
  return part;
}

json GenerationJob::chunk(const Choice& c, json payload, const char* finish_reason) const {
  json choice = {{"index", c.setup.index}};
  if (opts_.chat) {
    choice["delta"] = std::move(payload["delta"]);
    choice["logprobs"] = payload.contains("logprobs") ? std::move(payload["logprobs"]) : json(nullptr);
  } else {
    choice["text"] = std::move(payload["text"]);
    choice["logprobs"] = payload.contains("logprobs") ? std::move(payload["logprobs"]) : json(nullptr);
  }
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  json j = {{"id", opts_.id},
            {"object", opts_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", opts_.created},
            {"model", opts_.model},
            {"choices", json::array({std::move(choice)})}};
  if (opts_.include_usage) j["usage"] = nullptr;
  return j;
}

void GenerationJob::process(size_t k, GenerationEvent& ev, std::string& out) {
  Choice& c = choices_[k];
  if (c.done) return;
  if (ev.finished && ev.finish_reason == "error" && !error_) {
    error_ = api_error(ev.error.ok() ? internal_error("generation failed") : ev.error);
    if (error_->status < 500) error_->status = 500;  // the request was accepted: a server failure
  }
  // Text: completions take it as is; chat splits reasoning, then tool calls out of the content.
  ReasoningDelta rd;
  ToolParseDelta td;
  auto split = [&](std::string_view text, bool final) {
    ReasoningDelta r;
    if (c.reasoning) {
      r = c.reasoning->feed(text);
      if (final) {
        ReasoningDelta f = c.reasoning->finish();
        r.reasoning += f.reasoning;
        r.content += f.content;
      }
    } else {
      r.content = std::string(text);
    }
    rd.reasoning += r.reasoning;
    if (c.tools) {
      ToolParseDelta t = c.tools->feed(r.content);
      if (final) {
        ToolParseDelta f = c.tools->finish();
        t.content += f.content;
        for (auto& d : f.calls) t.calls.push_back(std::move(d));
      }
      td.content += t.content;
      for (auto& d : t.calls) td.calls.push_back(std::move(d));
    } else {
      td.content += r.content;
    }
  };
  if (opts_.chat) split(ev.text, ev.finished);
  c.completion_tokens = ev.completion_tokens;
  c.reasoning_text += rd.reasoning;

  const bool first = !c.started;
  c.started = true;
  std::string echo;
  json echo_logprobs;
  if (first && !opts_.chat && !c.setup.echo.empty()) {
    echo = c.setup.echo;
    if (opts_.n_logprobs >= 0) {  // prompt tokens: their own logprobs are not computed (null)
      echo_logprobs = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                       {"top_logprobs", json::array()}, {"text_offset", json::array()}};
      size_t offset = 0;
      for (int32_t id : c.setup.echo_ids) {
        const std::string s = lossy_text(token_bytes(tokenizer_, id));
        for (auto* dst : {&echo_logprobs, &c.logprobs}) {
          (*dst)["tokens"].push_back(s);
          (*dst)["token_logprobs"].push_back(nullptr);
          (*dst)["top_logprobs"].push_back(nullptr);
          (*dst)["text_offset"].push_back(int64_t(offset));
        }
        offset += s.size();
      }
    }
    c.text += echo;
  }
  json lp_part = add_logprobs(c, ev.logprobs);
  const std::string& new_text = opts_.chat ? td.content : ev.text;
  const size_t text_before = c.text.size();
  c.text += new_text;

  if (ev.finished) {
    c.done = true;
    ++n_done_;
    c.finish_reason = ev.finish_reason;
    if (c.tools && !c.tools->calls().empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  }
  if (!opts_.stream || error_) return;

  // Streaming: one chunk with this event's delta, then one with the finish reason.
  if (opts_.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!rd.reasoning.empty()) delta["reasoning_content"] = rd.reasoning;
    if (!td.content.empty() || (first && rd.reasoning.empty() && td.calls.empty())) delta["content"] = td.content;
    if (!td.calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& d : td.calls) {
        json fn = {{"arguments", d.arguments}};
        json call = {{"index", d.index}};
        if (!d.id.empty()) {
          call["id"] = d.id;
          call["type"] = "function";
          fn["name"] = d.name;
        }
        call["function"] = std::move(fn);
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    if (first || !rd.reasoning.empty() || !td.content.empty() || !td.calls.empty() || !lp_part.is_null()) {
      json payload = {{"delta", std::move(delta)}};
      if (!lp_part.is_null()) payload["logprobs"] = std::move(lp_part);
      out += sse_event(dump_json(chunk(c, std::move(payload), nullptr)));
    }
    if (c.done) out += sse_event(dump_json(chunk(c, json{{"delta", json::object()}}, c.finish_reason.c_str())));
  } else {
    std::string text = echo + c.text.substr(text_before);
    json logprobs = nullptr;
    if (!echo_logprobs.is_null() || !lp_part.is_null()) {
      logprobs = echo_logprobs.is_null() ? lp_part : echo_logprobs;
      if (!echo_logprobs.is_null() && !lp_part.is_null())
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (const json& e : lp_part[key]) logprobs[key].push_back(e);
    }
    if (!text.empty() || !logprobs.is_null()) {
      json payload = {{"text", std::move(text)}};
      if (!logprobs.is_null()) payload["logprobs"] = std::move(logprobs);
      out += sse_event(dump_json(chunk(c, std::move(payload), c.done ? c.finish_reason.c_str() : nullptr)));
    } else if (c.done) {
      out += sse_event(dump_json(chunk(c, json{{"text", ""}}, c.finish_reason.c_str())));
    }
  }
}

json GenerationJob::usage() const {
  int64_t prompt = 0, completion = 0;
  std::vector<int> seen;
  for (const Choice& c : choices_) {
    completion += c.completion_tokens;
    if (std::find(seen.begin(), seen.end(), c.setup.prompt_idx) == seen.end()) {
      seen.push_back(c.setup.prompt_idx);
      prompt += c.setup.prompt_tokens;
    }
  }
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

std::string GenerationJob::final_body(int* status) {
  if (error_) {
    *status = error_->status;
    return error_body(*error_);
  }
  *status = 200;
  json choices = json::array();
  for (const Choice& c : choices_) {
    json choice = {{"index", c.setup.index}};
    if (opts_.chat) {
      json msg = {{"role", "assistant"}};
      const bool has_calls = c.tools && !c.tools->calls().empty();
      const bool blank = c.text.find_first_not_of(" \t\r\n") == std::string::npos;
      msg["content"] = (has_calls && blank) ? json(nullptr) : json(c.text);
      if (opts_.split_reasoning) msg["reasoning_content"] = c.reasoning_text.empty() ? json(nullptr) : json(c.reasoning_text);
      if (has_calls) {
        json calls = json::array();
        for (const ToolCall& t : c.tools->calls())
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        msg["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(msg);
      choice["logprobs"] = opts_.n_logprobs >= 0 ? json{{"content", c.logprobs}} : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = opts_.n_logprobs >= 0 ? c.logprobs : json(nullptr);
    }
    choice["finish_reason"] = c.finish_reason;
    choices.push_back(std::move(choice));
  }
  json body = {{"id", opts_.id},
               {"object", opts_.chat ? "chat.completion" : "text_completion"},
               {"created", opts_.created},
               {"model", opts_.model},
               {"choices", std::move(choices)},
               {"usage", usage()}};
  return dump_json(body);
}

PendingResponse::Poll GenerationJob::poll() {
  Poll p;
  if (ended_) {
    p.done = true;
    return p;
  }
  std::deque<Item> items;
  {
    std::lock_guard<std::mutex> lk(mu_);
    items.swap(queue_);
  }
  for (Item& it : items) process(it.choice, it.event, p.data);
  if (error_ && opts_.stream) {
    // An error mid-stream: an error chunk, then [DONE]; the other choices are cancelled.
    p.data += sse_event(error_body(*error_));
    p.data += kSseDone;
    abandon();
    ended_ = p.done = true;
    return p;
  }
  if (n_done_ < choices_.size()) {
    if (error_) abandon();  // non-streaming: the answer is an error; stop the other choices
    return p;
  }
  if (opts_.stream) {
    if (opts_.include_usage) {
      json j = {{"id", opts_.id},
                {"object", opts_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", opts_.created},
                {"model", opts_.model},
                {"choices", json::array()},
                {"usage", usage()}};
      p.data += sse_event(dump_json(j));
    }
    p.data += kSseDone;
  } else {
    p.data = final_body(&p.status);
  }
  ended_ = p.done = true;
  return p;
}

}  // namespace pg::server
