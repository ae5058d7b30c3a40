// addnorm gradflow: registers the subcommand and its three subcommands (linear, transformer,
// norm-jacobian), and runs the one that was given.
#include <vector>

#include "commands.hpp"
#include "gradflow.hpp"

namespace addnorm::cli {

Command add_gradflow_command(CLI::App& root) {
  CLI::App* sub = root.add_subcommand(
      "gradflow", "Measure how gradients flow through residual and normalized stacks, and plot it");
  sub->require_subcommand(1, 1);
  sub->footer(
      "Subcommands:\n"
      "  linear         the seeds' stack of linear layers, y = W x against y = x + W x\n"
      "  transformer    transformer stacks at initialization, every placement and depth\n"
      "  norm-jacobian  the exact Jacobian of layer norm at a point, and Xiong et al.'s Lemma 3\n"
      "Run 'addnorm gradflow SUBCOMMAND --help' for the options of one. JSON schemas: docs/gradflow.md.\n"
      "Exit codes: 0 ok, 1 bad data or file, 2 usage error.");
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (auto* add : {gradflow::add_linear, gradflow::add_transformer, gradflow::add_norm_jacobian}) {
    Runner r = add(*sub);
    runners.emplace_back(sub->get_subcommands([](const CLI::App*) { return true; }).back(), std::move(r));
  }
  return {sub, [runners] {
            for (const auto& [app, run] : runners)
              if (app->parsed()) return run();
            return 2;
          }};
}

}  // namespace addnorm::cli
