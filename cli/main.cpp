// `peregrine`: the command-line entry point. Subcommands live in cmd_<name>.cpp.
#include <cstdio>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: inference engine and OpenAI-compatible server for the DeepSeek-V3 family"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "peregrine 0.1.0");
  std::vector<pg::cli::Command> commands = {
      pg::cli::add_info(app),
      pg::cli::add_tokenize(app),
      pg::cli::add_serve(app),
      pg::cli::add_bench(app),
      pg::cli::add_generate(app),
      pg::cli::add_eval(app),
      pg::cli::add_quantize(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error exits 2, as the commands' own usage errors do.
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& c : commands)
    if (c.app->parsed()) return c.run();
  return 2;
}
