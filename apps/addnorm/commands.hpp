// The addnorm CLI's subcommands. Each add_*_command registers its options on the root app and
// returns the function that runs it once parsing succeeded (exit code: 0 ok, 1 runtime error).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace addnorm::cli {

using Runner = std::function<int()>;

struct Command {
  CLI::App* app;
  Runner run;
};

Command add_norm_command(CLI::App& root);
Command add_gradflow_command(CLI::App& root);
Command add_params_command(CLI::App& root);

}  // namespace addnorm::cli
