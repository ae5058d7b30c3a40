// addnorm: the command-line lab. Thin: parses arguments with CLI11 and hands over to one
// subcommand. Exit codes: 0 success, 1 runtime error (bad data, unreadable file), 2 usage error.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/version.hpp"
#include "commands.hpp"

namespace {

// The message of a usage error. CLI11 reports an unknown first word as "A subcommand is
// required"; say instead that the word is not a subcommand, and list those that are.
std::string usage_error_text(CLI::App& app, const CLI::ParseError& e) {
  const std::vector<std::string> rest = app.remaining();
  if (!app.get_subcommands().empty() || rest.empty()) return e.what();
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  const std::string& word = rest.front();
  if (!word.empty() && word.front() == '-') return "'" + word + "' is not an option of addnorm";
  return "'" + word + "' is not a subcommand of addnorm (subcommands: " + names + ")";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"addnorm: residual connections and normalization (LayerNorm, RMSNorm, BatchNorm)", "addnorm"};
  app.set_version_flag("--version", addnorm::version_string, "Print the version and exit");
  app.require_subcommand(1, 1);
  app.footer("Run 'addnorm SUBCOMMAND --help' for the options of one subcommand.\n");

  std::vector<addnorm::cli::Command> commands;
  commands.push_back(addnorm::cli::add_norm_command(app));
  commands.push_back(addnorm::cli::add_gradflow_command(app));
  commands.push_back(addnorm::cli::add_params_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    std::cout << addnorm::version_string << "\n";
    return 0;
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "addnorm: error: " << usage_error_text(app, e) << "\n"
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
