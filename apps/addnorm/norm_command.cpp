// addnorm norm: compute, explain and compare normalizations from the command line.
//   addnorm norm [VALUES...] [--input FILE] [--kind layer|rms|batch] [--eps E]
//                [--gamma v,v,...] [--beta v,v,...] [--explain] [--json]
//                [--precision N] [--output FILE]
// Options and orchestration; the work is in norm_input.cpp, norm_compute.cpp, norm_explain.cpp
// and norm_output.cpp.
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "addnorm/io/csv.hpp"
#include "commands.hpp"
#include "norm.hpp"

namespace addnorm::cli {
namespace {

struct NormOptions {
  std::vector<std::string> values;
  std::optional<std::string> input;
  std::string kind_name = "layer";
  norm::Kind kind = norm::Kind::layer;  // set from kind_name once parsed
  double eps = 1e-5;
  std::optional<std::string> gamma, beta;
  bool explain = false;
  bool json = false;
  int precision = 4;
  std::optional<std::string> output;
};

// --eps: a finite number >= 0 (0 is the population standard deviation of the seeds).
const CLI::Validator kEps(
    [](std::string& s) -> std::string {
      const std::optional<double> v = io::parse_number(s);
      if (!v || !std::isfinite(*v) || *v < 0) return "must be a finite number >= 0, got '" + s + "'";
      return {};
    },
    "EPS>=0", "eps");

const CLI::Validator kOutputPath(
    [](std::string& s) -> std::string {
      if (norm::is_npy_path(s) || norm::is_csv_path(s)) return {};
      return "'" + s + "' must end in .npy or .csv";
    },
    "FILE.npy|FILE.csv", "output path");

int run_norm(const NormOptions& o) {
  norm::Input in = norm::load_input(o.values, o.input);
  std::vector<double> gamma = o.gamma ? norm::parse_list(*o.gamma, "--gamma") : std::vector<double>{};
  std::vector<double> beta = o.beta ? norm::parse_list(*o.beta, "--beta") : std::vector<double>{};
  const norm::Result r = norm::compute(o.kind, o.eps, std::move(in), std::move(gamma), std::move(beta));

  for (int64_t g : norm::nonfinite_groups(r))
    std::cerr << "addnorm: warning: " << r.where(g) << ": NaN or infinity in the input; the output there is NaN\n";

  // The file first: if writing fails, nothing was printed as if it had worked.
  if (o.output) norm::write_output(r, *o.output);
  if (o.json) {
    std::ostringstream steps;
    if (o.explain) norm::print_explain(r, o.precision, steps);
    norm::print_json(r, std::cout, steps.str());
  } else if (o.explain) {
    norm::print_explain(r, o.precision, std::cout);
  } else {
    norm::print_plain(r, o.precision, std::cout);
  }
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

Command add_norm_command(CLI::App& root) {
  auto o = std::make_shared<NormOptions>();
  CLI::App* sub = root.add_subcommand("norm", "Normalize numbers (LayerNorm, RMSNorm, BatchNorm), step by step");
  sub->footer(
      "Examples:\n"
      "  addnorm norm 2 4 6 8 --explain          the seeds' token \"cat\", every step\n"
      "  addnorm norm 3 5 2 6 --gamma 0.5,1,1.5,2\n"
      "  addnorm norm --input house.csv --kind batch --eps 0\n"
      "  addnorm norm -- -1 2 5                 negative first value\n"
      "Input: VALUES form one row; --input reads a 1-D or 2-D .npy (f32, f64, int32, int64) or a CSV\n"
      "file (rows of numbers, optional header line, comma/semicolon/whitespace separated); '-' reads\n"
      "CSV from standard input. layer and rms normalize each row, batch each column (a single row of\n"
      "values is one column). Exit codes: 0 ok, 1 bad data or file, 2 usage error.");
  auto* values =
      sub->add_option("values", o->values, "The values of one row (negative values work; -- ends the options)");
  auto* input = sub->add_option("--input,-i", o->input, "A .npy or CSV file ('-': CSV from standard input)");
  values->excludes(input);
  sub->add_option("--kind,-k", o->kind_name, "layer (each row), rms (each row, no mean) or batch (each column)")
      ->check(CLI::IsMember({"layer", "rms", "batch"}))
      ->type_name("layer|rms|batch")
      ->capture_default_str();
  sub->add_option("--eps", o->eps, "eps under the square root (0: the population standard deviation)")
      ->check(kEps)
      ->default_str("1e-05");
  sub->add_option("--gamma", o->gamma, "Scale, one value per column: v,v,... (default all 1)");
  auto* beta = sub->add_option("--beta", o->beta, "Shift, one value per column: v,v,... (default all 0; not for rms)");
  sub->add_flag("--explain", o->explain, "Print every step, the way the seeds work it");
  sub->add_flag("--json", o->json,
                "Print one JSON object: statistics, x_hat and y (with --explain, the steps as \"explain\")");
  sub->add_option("--precision,-p", o->precision, "Decimals of the printed values (statistics get 2 more)")
      ->check(CLI::Range(0, 15))
      ->capture_default_str();
  sub->add_option("--output,-o", o->output, "Also write y to FILE.npy (input's dtype, f64 for values) or FILE.csv")
      ->check(kOutputPath);
  sub->final_callback([o, beta] {
    o->kind = o->kind_name == "rms" ? norm::Kind::rms : o->kind_name == "batch" ? norm::Kind::batch : norm::Kind::layer;
    if (o->values.empty() && !o->input)
      throw CLI::ValidationError("norm", "give the values of one row, or --input FILE");
    if (o->kind == norm::Kind::rms && beta->count() > 0)
      throw CLI::ValidationError("--beta", "--kind rms has no beta (RMSNorm only scales)");
  });
  return {sub, [o] { return run_norm(*o); }};
}

}  // namespace addnorm::cli
