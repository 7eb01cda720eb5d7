// Chat prompts: the model's chat template (from the model folder or --chat-template, never from a
// request) rendered over the messages, then tokenized so that only the template's own literal
// text can produce control tokens; text from messages is always tokenized as plain text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/openai_protocol.h"

namespace pg {
class Tokenizer;
}

namespace pg::server {

struct ChatPrompt {
  std::vector<int32_t> ids;
  std::string text;              // the rendered prompt
  bool opens_reasoning = false;  // the prompt ends inside an opened <think> block
};

class ChatTemplate {
 public:
  // `template_file` (from --chat-template) wins; else the model folder's chat_template.jinja,
  // else tokenizer_config.json's "chat_template" (a string, or the entry named "default").
  static Result<std::unique_ptr<ChatTemplate>> load(const std::string& model_dir, const std::string& template_file,
                                                    std::shared_ptr<const Tokenizer> tokenizer);
  ~ChatTemplate();

  Result<ChatPrompt> render(const ChatRequest& req) const;
  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg::server
