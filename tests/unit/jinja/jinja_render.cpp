// jinja_render TEMPLATE_FILE [CONTEXT_JSON_FILE]: renders a template with pg_jinja and prints the
// result (or the error, exit 1). A debugging aid for comparing against Python Jinja2 by hand.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja/template.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: jinja_render TEMPLATE_FILE [CONTEXT_JSON_FILE]\n");
    return 2;
  }
  auto slurp = [](const char* path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (argc > 2) ctx = nlohmann::ordered_json::parse(slurp(argv[2]), nullptr, false);
  if (ctx.is_discarded()) {
    std::fprintf(stderr, "context is not valid JSON\n");
    return 2;
  }
  auto tmpl = pg::jinja::Template::parse(slurp(argv[1]));
  if (!tmpl.ok()) {
    std::fprintf(stderr, "%s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  auto out = tmpl->render(ctx);
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}
