// addnorm: the command-line lab. Thin: parses arguments with CLI11 and hands over to one
// subcommand. Exit codes: 0 success, 1 runtime error (bad data, unreadable file), 2 usage error.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/version.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"addnorm: residual connections and normalization (LayerNorm, RMSNorm, BatchNorm)",
               "addnorm"};
  app.set_version_flag("--version", addnorm::version_string, "Print the version and exit");
  app.require_subcommand(1, 1);
  app.footer("Run 'addnorm SUBCOMMAND --help' for the options of one subcommand.");

  std::vector<addnorm::cli::Command> commands;
  commands.push_back(addnorm::cli::add_norm_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "addnorm: error: " << e.what() << "\n"
              << "Run 'addnorm --help' for usage.\n";
    return 2;
  }

  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const addnorm::Error& e) {
    std::cerr << "addnorm: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "addnorm: internal error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
