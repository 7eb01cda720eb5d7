// Chat templates from tokenizer_config.json, rendered the way transformers' apply_chat_template
// calls Jinja2: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
// **special_tokens_map, **kwargs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace pg::jinja {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;  // null renders as None (transformers passes tools=None)
  // More template variables (e.g. "thinking", "documents"); they override the ones above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // `config` is a parsed tokenizer_config.json. chat_template is a string, or a list of
  // {"name", "template"} from which `name` is picked. Special tokens (bos_token, eos_token, ...,
  // plain strings or AddedToken objects) become template variables whose text counts as literal.
  static Result<ChatTemplate> from_tokenizer_config(const nlohmann::ordered_json& config,
                                                    std::string_view name = "default");
  static Result<ChatTemplate> from_tokenizer_config(const nlohmann::json& config, std::string_view name = "default");
  // A template source with its special tokens ({"bos_token": "<s>", ...}).
  static Result<ChatTemplate> from_source(
      std::string_view source, const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  Result<std::vector<Segment>> render_segments(const ChatRequest& request, const RenderOptions& options = {}) const;
  Result<std::string> render(const ChatRequest& request, const RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }
  // name -> token text, as passed to the template.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate(Template tmpl, std::string source, nlohmann::ordered_json special_tokens)
      : tmpl_(std::move(tmpl)), source_(std::move(source)), special_tokens_(std::move(special_tokens)) {}
  Result<nlohmann::ordered_json> context(const ChatRequest& request, RenderOptions& options) const;

  Template tmpl_;
  std::string source_;
  nlohmann::ordered_json special_tokens_;
};

}  // namespace pg::jinja
