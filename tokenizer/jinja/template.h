// Sandboxed Jinja-subset interpreter for chat templates, byte-identical to Python Jinja2 3.1 as
// transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, its tojson / raise_exception / strftime_now helpers).
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pg::jinja {

struct Program;

// Bounds that make rendering a hostile template fail fast instead of hanging or exhausting memory.
struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // rendered text, and any single string or captured block
  // Statements, expression nodes and loop iterations, plus bulk work (1 per 64 bytes or 8 items);
  // a step is ~0.1-0.2 us; 15k-message chats with tool calls render well within the default.
  uint64_t max_steps = 5'000'000;
  int max_recursion_depth = 64;                 // nested macro / caller() calls
  size_t max_memory_bytes = size_t{256} << 20;  // live bytes of strings and lists made while rendering
  // Stack the interpreter may use (deep nesting and macro recursion): the rendering thread needs
  // this much free stack plus ~256 KiB. Deeper renders fail with ResourceExhausted.
  size_t max_stack_bytes = size_t{2} << 20;
};

struct RenderOptions {
  RenderOptions() = default;
  RenderOptions(const RenderLimits& l) : limits(l) {}  // NOLINT: implicit, so render(ctx, limits) reads naturally
  RenderLimits limits;
  // Top-level context variables whose strings count as template text in render_segments (the
  // special tokens transformers passes: bos_token, eos_token...). Everything else from the
  // context is data.
  std::vector<std::string> literal_vars;
  // The clock strftime_now() reads, as local broken-down time; unset = the system's local time.
  std::function<std::tm()> now;
};

// A piece of rendered text. literal = it came from the template's own text or string literals
// (or a literal_vars variable), so special-token strings in it are meant as special tokens;
// text from context data (user messages, tool output) has literal = false.
struct Segment {
  std::string text;
  bool literal = false;
  bool operator==(const Segment&) const = default;
};

class Template {
 public:
  // Parses a template. Never throws; syntax errors and unsupported constructs (tag, filter, test)
  // give an error naming the construct and its line:column.
  static Result<Template> parse(std::string_view source);

  // Renders with `context` (a JSON object) as the template's variables. Use ordered_json to keep
  // Python's dict order (it shows in tojson and in iteration over mappings).
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;
  // The same text as render(), split by provenance; adjacent segments differ in `literal`.
  Result<std::vector<Segment>> render_segments(const nlohmann::ordered_json& context,
                                               const RenderOptions& options = {}) const;
  Result<std::vector<Segment>> render_segments(const nlohmann::json& context, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;  // immutable; a Template may render on many threads
};

}  // namespace pg::jinja
