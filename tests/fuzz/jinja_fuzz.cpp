// libFuzzer target for pg_jinja (tokenizer/jinja): any bytes parse and render under tight limits
// without crashing, hanging or leaking; rendered segments must concatenate to the rendered text.
// Input: TEMPLATE [\0 CONTEXT_JSON]; without a context, a small chat-shaped one is used.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/check.h"
#include "tokenizer/jinja/template.h"

namespace {

const nlohmann::ordered_json& default_context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": "hi <|im_end|> ü"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
      {"role": "tool", "content": "out"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "n": 3, "d": {"b": 1, "a": [1, 2]}
  })");
  return ctx;
}

std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mday = 1;
  return tm;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);

  auto tmpl = pg::jinja::Template::parse(source);
  if (!tmpl.ok()) {
    PG_CHECK(!tmpl.status().message().empty(), "parse error without a message");
    return 0;
  }

  nlohmann::ordered_json ctx = default_context();
  if (nul != std::string_view::npos) {
    auto parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) ctx = std::move(parsed);
  }

  pg::jinja::RenderOptions opts;
  opts.limits.max_output_bytes = 64 << 10;
  opts.limits.max_steps = 100'000;
  opts.limits.max_recursion_depth = 16;
  opts.limits.max_memory_bytes = 16 << 20;
  opts.literal_vars = {"bos_token", "eos_token"};
  opts.now = fixed_now;

  auto segs = tmpl->render_segments(ctx, opts);
  auto text = tmpl->render(ctx, opts);
  PG_CHECK(segs.ok() == text.ok(), "render and render_segments disagree on success");
  if (!text.ok()) {
    PG_CHECK(!text.status().message().empty(), "render error without a message");
    return 0;
  }
  std::string joined;
  for (size_t i = 0; i < segs->size(); ++i) {
    const auto& s = (*segs)[i];
    PG_CHECK(!s.text.empty(), "empty segment {}", i);
    if (i > 0) PG_CHECK(s.literal != (*segs)[i - 1].literal, "adjacent segments {} share provenance", i);
    joined += s.text;
  }
  PG_CHECK(joined == *text, "segments do not concatenate to the rendered text");
  PG_CHECK(text->size() <= opts.limits.max_output_bytes, "output {} over the limit", text->size());
  return 0;
}
