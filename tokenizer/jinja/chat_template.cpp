// ChatTemplate (see chat_template.h): picks the template out of tokenizer_config.json and builds
// the render context like transformers (special_tokens_map, tools=None, documents=None).
#include "tokenizer/jinja/chat_template.h"

#include <fmt/format.h>

namespace pg::jinja {
namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

// A special token is a string or an AddedToken object {"content": ...}; null means unset.
Result<std::optional<std::string>> token_text(const nlohmann::ordered_json& v, std::string_view key) {
  if (v.is_null()) return std::optional<std::string>{};
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return std::optional<std::string>(it->get<std::string>());
  }
  return invalid_argument("tokenizer_config.json: '{}' is neither a string nor an AddedToken object", key);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(std::string_view source, const nlohmann::ordered_json& special_tokens) {
  if (!special_tokens.is_object()) return invalid_argument("chat template special tokens must be a JSON object");
  auto tmpl = Template::parse(source);
  if (!tmpl.ok()) return tmpl.status().with_context("chat_template");
  return ChatTemplate(std::move(tmpl).value(), std::string(source), special_tokens);
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& config, std::string_view name) {
  if (!config.is_object()) return invalid_argument("tokenizer_config.json must hold a JSON object");
  auto ct = config.find("chat_template");
  if (ct == config.end() || ct->is_null()) return not_found("tokenizer_config.json has no chat_template");
  std::string source;
  if (ct->is_string()) {
    source = ct->get<std::string>();
  } else if (ct->is_array()) {
    bool found = false;
    for (const auto& entry : *ct) {
      if (!entry.is_object()) continue;
      auto n = entry.find("name");
      auto t = entry.find("template");
      if (n == entry.end() || t == entry.end() || !n->is_string() || !t->is_string()) continue;
      if (n->get<std::string>() == name) {
        source = t->get<std::string>();
        found = true;
        break;
      }
    }
    if (!found) return not_found("tokenizer_config.json has no chat_template named '{}'", name);
  } else {
    return invalid_argument("tokenizer_config.json: chat_template must be a string or a list of {{name, template}}");
  }
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  for (const char* key : kSpecialTokenKeys) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    PG_ASSIGN_OR_RETURN(auto text, token_text(*it, key));
    if (text) tokens[key] = *text;
  }
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      PG_ASSIGN_OR_RETURN(auto text, token_text(t, "additional_special_tokens"));
      if (text) list.push_back(*text);
    }
    tokens["additional_special_tokens"] = std::move(list);
  }
  return from_source(source, tokens);
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const nlohmann::json& config, std::string_view name) {
  return from_tokenizer_config(nlohmann::ordered_json(config), name);
}

Result<nlohmann::ordered_json> ChatTemplate::context(const ChatRequest& request, RenderOptions& options) const {
  if (!request.messages.is_array()) return invalid_argument("chat messages must be a JSON array");
  if (!request.extra.is_object() && !request.extra.is_null())
    return invalid_argument("extra chat template variables must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = request.messages;
  ctx["tools"] = request.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = request.add_generation_prompt;
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
    ctx[it.key()] = it.value();
    options.literal_vars.push_back(it.key());
  }
  if (request.extra.is_object())
    for (auto it = request.extra.begin(); it != request.extra.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

Result<std::vector<Segment>> ChatTemplate::render_segments(const ChatRequest& request,
                                                           const RenderOptions& options) const {
  RenderOptions opts = options;
  PG_ASSIGN_OR_RETURN(auto ctx, context(request, opts));
  return tmpl_.render_segments(ctx, opts);
}

Result<std::string> ChatTemplate::render(const ChatRequest& request, const RenderOptions& options) const {
  RenderOptions opts = options;
  PG_ASSIGN_OR_RETURN(auto ctx, context(request, opts));
  return tmpl_.render(ctx, opts);
}

}  // namespace pg::jinja
