// `pg_scripted_server`: the real HTTP server and protocol code over ScriptedBackend, so the
// end-to-end tests can drive tool calls and reasoning output through the official client.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "server/server.h"
#include "tests/unit/server/scripted_backend.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace pg;
  CLI::App app{"Scripted Peregrine server for tests"};
  server::ServeOptions o;
  int step_ms = 2;
  int64_t max_model_len = 256;
  app.add_option("model_dir", o.model_dir, "Folder with tokenizer.json / tokenizer_config.json")->required();
  app.add_option("--port", o.port);
  app.add_option("--chat-template", o.chat_template);
  app.add_option("--reasoning-parser", o.reasoning_parser);
  app.add_option("--served-model-name", o.served_model_names);
  app.add_option("--step-ms", step_ms, "Milliseconds per scripted token");
  app.add_option("--max-model-len", max_model_len);
  app.add_option("--shutdown-timeout", o.shutdown_timeout_s);
  CLI11_PARSE(app, argc, argv);
  if (o.served_model_names.empty()) o.served_model_names.push_back("scripted");

  auto tok = Tokenizer::load(o.model_dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto tokenizer = std::make_shared<const Tokenizer>(std::move(tok).value());
  auto tmpl = server::ChatTemplate::load(o.model_dir, o.chat_template, tokenizer);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "%s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  server::testing::ScriptedBackend backend(tokenizer, max_model_len, std::chrono::milliseconds(step_ms));
  server::HttpStack stack;
  stack.backend = &backend;
  stack.tokenizer = tokenizer;
  stack.chat_template = tmpl->get();
  stack.add_bos_to_completions = tokenizer->add_bos_token();
  stack.stop_backend = [&](std::chrono::steady_clock::time_point deadline) { backend.stop(deadline); };
  return server::run_http(o, std::move(stack));
}
