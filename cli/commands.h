// The `peregrine` subcommands. Each cmd_<name>.cpp adds its subcommand to the app and
// returns the handler to run when it was chosen; a handler returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace pg::cli {

using Handler = std::function<int()>;
struct Command {
  CLI::App* app;
  Handler run;
};

Command add_info(CLI::App& root);
Command add_tokenize(CLI::App& root);
Command add_serve(CLI::App& root);
Command add_bench(CLI::App& root);
Command add_generate(CLI::App& root);
Command add_eval(CLI::App& root);
Command add_quantize(CLI::App& root);

}  // namespace pg::cli
