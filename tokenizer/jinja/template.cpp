// Template: the public entry points (parse, render, render_segments). Converts the JSON context,
// runs the interpreter and splits the result by provenance. Nothing here throws.
#include "tokenizer/jinja/template.h"

#include <algorithm>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

template <typename Json>
Result<Value> context_value(const Json& context, const RenderOptions& options) {
  if (!context.is_object()) return invalid_argument("template context must be a JSON object");
  auto d = std::make_shared<DictObj>();
  for (auto it = context.begin(); it != context.end(); ++it) {
    const bool literal =
        std::find(options.literal_vars.begin(), options.literal_vars.end(), it.key()) != options.literal_vars.end();
    PG_ASSIGN_OR_RETURN(Value v, from_json(it.value(), literal, 1));
    const std::string key = "s" + it.key();
    auto found = d->index.find(key);
    if (found != d->index.end()) {
      d->items[found->second].second = std::move(v);
      continue;
    }
    d->index.emplace(key, d->items.size());
    d->items.emplace_back(Value::str(it.key(), false), std::move(v));
  }
  return Value(DictP(std::move(d)));
}

template <typename Json>
Result<std::vector<Segment>> render_impl(const Program& program, const Json& context, const RenderOptions& options) {
  PG_ASSIGN_OR_RETURN(Value ctx, context_value(context, options));
  StrBuilder out;
  {
    Interp interp(options);
    PG_TRY(interp.render(program, ctx, out));
  }
  std::vector<Segment> segs;
  size_t b = 0;
  for (const Run& r : out.runs()) {
    segs.push_back({out.bytes().substr(b, r.end - b), r.literal});
    b = r.end;
  }
  return segs;
}

std::string join(const std::vector<Segment>& segs) {
  size_t n = 0;
  for (const auto& s : segs) n += s.text.size();
  std::string out;
  out.reserve(n);
  for (const auto& s : segs) out += s.text;
  return out;
}

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  PG_ASSIGN_OR_RETURN(auto program, parse_program(source));
  return Template(std::move(program));
}

Result<std::vector<Segment>> Template::render_segments(const nlohmann::ordered_json& context,
                                                       const RenderOptions& options) const {
  return render_impl(*program_, context, options);
}

Result<std::vector<Segment>> Template::render_segments(const nlohmann::json& context,
                                                       const RenderOptions& options) const {
  return render_impl(*program_, context, options);
}

Result<std::string> Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  PG_ASSIGN_OR_RETURN(auto segs, render_impl(*program_, context, options));
  return join(segs);
}

Result<std::string> Template::render(const nlohmann::json& context, const RenderOptions& options) const {
  PG_ASSIGN_OR_RETURN(auto segs, render_impl(*program_, context, options));
  return join(segs);
}

}  // namespace pg::jinja
