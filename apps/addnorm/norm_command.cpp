// addnorm norm: normalize numbers given on the command line (first version; file input, batch
// norm and --explain land with issue 5).
#include <cstdio>
#include <memory>
#include <vector>

#include "addnorm/norm/reference.hpp"
#include "commands.hpp"

namespace addnorm::cli {
namespace {
struct NormOptions {
  std::vector<double> values;
  double eps = 1e-5;
};
}  // namespace

Command add_norm_command(CLI::App& root) {
  auto opts = std::make_shared<NormOptions>();
  CLI::App* sub = root.add_subcommand("norm", "Layer-normalize numbers");
  sub->add_option("values", opts->values, "The values of one row")->required();
  sub->add_option("--eps", opts->eps, "eps under the square root")->capture_default_str();
  return {sub, [opts] {
            const auto f = ref::layer_norm_forward<double>(
                View2D<const double>(opts->values.data(), 1, static_cast<int64_t>(opts->values.size())), {}, {},
                opts->eps);
            for (double v : f.y) std::printf("%.4f ", v);
            std::printf("\n");
            return 0;
          }};
}

}  // namespace addnorm::cli
