// addnorm gradflow: how gradients flow through residual and normalized stacks. Three
// subcommands, each in its own files:
//   gradflow_command.cpp      registers `gradflow` and its subcommands
//   gradflow_linear.cpp       `gradflow linear`: the seeds' stack of linear layers
//   gradflow_transformer.cpp  `gradflow transformer`: options and orchestration
//   gradflow_report.cpp       its table, literature claims, --json, --csv and --plot
//   gradflow_jacobian.cpp     `gradflow norm-jacobian`: layer norm's Jacobian and Xiong's Lemma 3
//   gradflow_table.cpp        unicode bars shared by the tables
// The computing is in lab/ (include/addnorm/lab); these files parse, print and write.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "addnorm/lab/transformer_gradflow.hpp"
#include "commands.hpp"

namespace addnorm::cli::gradflow {

// Each registers its subcommand under `gradflow` and returns its runner.
Runner add_linear(CLI::App& gradflow);
Runner add_transformer(CLI::App& gradflow);
Runner add_norm_jacobian(CLI::App& gradflow);

// `gradflow transformer`'s results and the options that produced them.
struct TransformerReport {
  lab::TransformerGradflowConfig base;  // the sizes and setup; placement, norm, layers vary
  int64_t seeds = 0;
  uint64_t seed = 0;
  std::string dtype;  // "f32" or "f64"
  std::vector<lab::TransformerGradflow> results;  // norm-major, then placement, then depth
};

// gradflow_report.cpp: the summary table, per-layer tables with bars, and the literature's claims
// next to the measurements; --json, --csv (text) and --plot.
void print_transformer_text(const TransformerReport& r, std::ostream& os);
void print_transformer_json(const TransformerReport& r, std::ostream& os);
std::string transformer_csv(const TransformerReport& r);
void write_transformer_plot(const TransformerReport& r, const std::string& path);

// A horizontal bar of `width` cells for a fraction in [0, 1] (clamped; NaN gives no bar), drawn
// with the eighth blocks U+2588..U+258F, padded with spaces to `width` cells.
std::string bar(double fraction, int width);

// The position of v between lo and hi on a log scale, in [0, 1]; 0 for v <= 0 or NaN.
double log_fraction(double v, double lo, double hi);

// "%.*e" / "%.*f" as Python's format specs write them ("8.62e-04", "3.31").
std::string fmt_e(double v, int decimals);
std::string fmt_f(double v, int decimals);

}  // namespace addnorm::cli::gradflow
