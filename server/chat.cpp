// Chat prompts (see chat.h). Tokenization by provenance: the template's literal text (and the
// special-token variables bos_token/eos_token) is scanned for added tokens; message text never
// is. The plain text between added tokens is encoded as one run across segment boundaries, so a
// benign conversation tokenizes exactly as Hugging Face's apply_chat_template + encode does.
#include "server/chat.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/reasoning_parser.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace pg::server {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::string source;
  std::optional<jinja::Template> tmpl;
  std::shared_ptr<const Tokenizer> tokenizer;
  AddedTokenTrie trie;
  std::string bos_token, eos_token;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
const std::string& ChatTemplate::source() const { return impl_->source; }

static Result<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return not_found("cannot read '{}'", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The template source: --chat-template, chat_template.jinja, or tokenizer_config.json.
static Result<std::string> find_source(const std::string& model_dir, const std::string& file) {
  if (!file.empty()) return read_file(file);
  const fs::path dir(model_dir);
  std::error_code ec;
  if (fs::exists(dir / "chat_template.jinja", ec)) return read_file(dir / "chat_template.jinja");
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (!fs::exists(cfg_path, ec)) return not_found("no chat template: '{}' has no tokenizer_config.json", model_dir);
  PG_ASSIGN_OR_RETURN(std::string text, read_file(cfg_path));
  json cfg = json::parse(text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) return data_loss("'{}' is not a JSON object", cfg_path.string());
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return not_found("no chat template in '{}'", cfg_path.string());
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const json& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
  }
  return not_found("'{}' has no usable \"chat_template\" (a string or a list with a \"default\" entry)",
                   cfg_path.string());
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::load(const std::string& model_dir, const std::string& template_file,
                                                         std::shared_ptr<const Tokenizer> tokenizer) {
  auto impl = std::make_unique<Impl>();
  PG_ASSIGN_OR_RETURN(impl->source, find_source(model_dir, template_file));
  auto parsed = jinja::Template::parse(impl->source);
  if (!parsed.ok()) return parsed.status().with_context("chat template");
  impl->tmpl.emplace(std::move(parsed).value());
  const auto& added = tokenizer->added_tokens();
  for (size_t i = 0; i < added.size(); ++i) impl->trie.insert(added[i].content, int32_t(i));
  if (auto id = tokenizer->bos_id()) impl->bos_token = std::string(tokenizer->id_to_token(*id).value_or(""));
  if (auto id = tokenizer->eos_id()) impl->eos_token = std::string(tokenizer->id_to_token(*id).value_or(""));
  impl->tokenizer = std::move(tokenizer);
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(impl)));
}

static ojson message_json(const ChatMessage& m) {
  ojson j;
  // DeepSeek's templates know "system"; OpenAI's newer "developer" role means the same.
  j["role"] = m.role == "developer" ? "system" : m.role;
  j["content"] = m.content ? ojson(*m.content) : ojson(nullptr);
  if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCall& c : m.tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    j["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.name.empty()) j["name"] = m.name;
  return j;
}

Result<ChatPrompt> ChatTemplate::render(const ChatRequest& req) const {
  const Impl& m = *impl_;
  ojson ctx = ojson::object();
  for (const auto& [k, v] : req.chat_template_kwargs.items()) ctx[k] = ojson::parse(v.dump());
  ojson messages = ojson::array();
  for (const ChatMessage& msg : req.messages) messages.push_back(message_json(msg));
  ctx["messages"] = std::move(messages);
  if (!req.tools.empty()) ctx["tools"] = ojson::parse(req.tools.dump());
  ctx["add_generation_prompt"] = req.add_generation_prompt;
  ctx["bos_token"] = m.bos_token;
  ctx["eos_token"] = m.eos_token;
  jinja::RenderOptions opts;
  opts.literal_vars = {"bos_token", "eos_token"};
  auto rendered = m.tmpl->render_segments(ctx, opts);
  if (!rendered.ok()) return invalid_argument("the chat template failed on these messages: {}", rendered.status().message());
  std::vector<jinja::Segment> segments = std::move(rendered).value();

  if (req.continue_final_message) {  // cut after the final assistant text: the model continues it
    std::string all;
    for (const auto& s : segments) all += s.text;
    const std::string& last = req.messages.back().content.value_or("");
    const size_t pos = all.rfind(last);
    if (last.empty() || pos == std::string::npos)
      return invalid_argument("continue_final_message: the final message's text is not in the rendered prompt");
    size_t keep = pos + last.size();
    std::vector<jinja::Segment> cut;
    for (auto& s : segments) {
      if (keep == 0) break;
      if (s.text.size() > keep) s.text.resize(keep);
      keep -= s.text.size();
      cut.push_back(std::move(s));
    }
    segments = std::move(cut);
  }

  ChatPrompt out;
  const auto& added = m.tokenizer->added_tokens();
  EncodeOptions plain;
  plain.parse_special = false;
  plain.add_bos = false;
  plain.add_eos = false;
  std::string run;  // plain text waiting to be encoded
  Status st;
  auto flush = [&]() -> bool {
    if (run.empty()) return true;
    st = m.tokenizer->encode_append(run, plain, out.ids);
    run.clear();
    return st.ok();
  };
  for (const auto& s : segments) {
    out.text += s.text;
    if (!s.literal) {
      run += s.text;
      continue;
    }
    const bool ok = m.trie.split(
        s.text, added,
        [&](int32_t idx) {
          if (!flush()) return false;
          out.ids.push_back(added[size_t(idx)].id);
          return true;
        },
        [&](std::string_view text) {
          run += text;
          return true;
        });
    if (!ok) return st;
  }
  if (!flush()) return st;
  out.opens_reasoning = prompt_opens_reasoning(out.text);
  return out;
}

}  // namespace pg::server
