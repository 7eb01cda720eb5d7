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
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pg::server {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::optional<jinja::ChatTemplate> tmpl;
  std::shared_ptr<const Tokenizer> tokenizer;
  AddedTokenTrie trie;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
const std::string& ChatTemplate::source() const { return impl_->tmpl->source(); }

static Result<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return not_found("cannot read '{}'", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --chat-template FILE, else <model_dir>/chat_template.jinja, else tokenizer_config.json's
// "chat_template". Special tokens (bos_token...) come from tokenizer_config.json when it exists.
static Result<jinja::ChatTemplate> find_template(const std::string& model_dir, const std::string& file) {
  const fs::path dir(model_dir);
  std::error_code ec;
  ojson config = ojson::object();
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    PG_ASSIGN_OR_RETURN(std::string text, read_file(dir / "tokenizer_config.json"));
    config = ojson::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return data_loss("'{}' is not a JSON object", (dir / "tokenizer_config.json").string());
  }
  std::string source;
  if (!file.empty()) {
    PG_ASSIGN_OR_RETURN(source, read_file(file));
  } else if (fs::exists(dir / "chat_template.jinja", ec)) {
    PG_ASSIGN_OR_RETURN(source, read_file(dir / "chat_template.jinja"));
  } else {
    if (!config.contains("chat_template")) return not_found("no chat template in '{}'", model_dir);
    return jinja::ChatTemplate::from_tokenizer_config(config);
  }
  // The special tokens as from_tokenizer_config would pass them, with this source.
  ojson probe = config;
  probe["chat_template"] = "";
  auto specials = jinja::ChatTemplate::from_tokenizer_config(probe);
  return jinja::ChatTemplate::from_source(source, specials.ok() ? specials->special_tokens() : ojson::object());
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::load(const std::string& model_dir, const std::string& template_file,
                                                         std::shared_ptr<const Tokenizer> tokenizer) {
  auto impl = std::make_unique<Impl>();
  auto t = find_template(model_dir, template_file);
  if (!t.ok()) return t.status().with_context("chat template");
  impl->tmpl.emplace(std::move(t).value());
  const auto& added = tokenizer->added_tokens();
  for (size_t i = 0; i < added.size(); ++i) impl->trie.insert(added[i].content, int32_t(i));
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
  jinja::ChatRequest jr;
  for (const ChatMessage& msg : req.messages) jr.messages.push_back(message_json(msg));
  jr.add_generation_prompt = req.add_generation_prompt;
  jr.tools = req.tools.empty() ? ojson(nullptr) : ojson::parse(req.tools.dump());  // None, as transformers
  for (const auto& [k, v] : req.chat_template_kwargs.items())
    if (k != "messages" && k != "add_generation_prompt") jr.extra[k] = ojson::parse(v.dump());
  auto rendered = m.tmpl->render_segments(jr);
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
