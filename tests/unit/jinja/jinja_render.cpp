// jinja_render TEMPLATE_FILE [CONTEXT_JSON_FILE]: renders a template with pg_jinja and prints the
// result (or the error, exit 1). jinja_render --batch CASES_JSON: renders [{"template", "context"}]
// and prints [{"output"} | {"error"}] as JSON, for differential checks against Python Jinja2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/jinja/template.h"

namespace {

std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::tm fixed_now() {  // tools/jinja_golden.py FIXED_NOW
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 15;
  tm.tm_min = 9;
  tm.tm_sec = 26;
  tm.tm_wday = 5;
  tm.tm_yday = 72;
  return tm;
}

pg::Result<std::string> render(const std::string& src, const nlohmann::ordered_json& ctx) {
  auto tmpl = pg::jinja::Template::parse(src);
  if (!tmpl.ok()) return tmpl.status();
  pg::jinja::RenderOptions opts;
  opts.now = fixed_now;
  return tmpl->render(ctx, opts);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: jinja_render TEMPLATE_FILE [CONTEXT_JSON_FILE] | --batch CASES_JSON\n");
    return 2;
  }
  if (std::string(argv[1]) == "--batch" && argc > 2) {
    auto cases = nlohmann::ordered_json::parse(slurp(argv[2]), nullptr, false);
    if (!cases.is_array()) return 2;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& c : cases) {
      const auto ctx = c.contains("context") ? c["context"] : nlohmann::ordered_json::object();
      auto r = render(c.value("template", ""), ctx);
      nlohmann::ordered_json o;
      if (r.ok())
        o["output"] = *r;
      else
        o["error"] = r.status().to_string();
      out.push_back(o);
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (argc > 2) ctx = nlohmann::ordered_json::parse(slurp(argv[2]), nullptr, false);
  if (ctx.is_discarded()) {
    std::fprintf(stderr, "context is not valid JSON\n");
    return 2;
  }
  auto out = render(slurp(argv[1]), ctx);
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}
