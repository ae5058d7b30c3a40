// addnorm gradflow linear: the seeds' experiment "Measuring the gradient through a residual
// stack", on the seeds' own weights (--weights, as np.stack(Ws) saves them) or on addnorm's seeded
// generator. Prints the seeds' lines, then each run's per-layer profile as a table with bars.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "addnorm/core/error.hpp"
#include "addnorm/io/npy.hpp"
#include "addnorm/io/svg.hpp"
#include "addnorm/lab/linear_gradflow.hpp"
#include "gradflow.hpp"

namespace addnorm::cli::gradflow {
namespace {

constexpr const char* kFn = "gradflow linear";

struct LinearOptions {
  std::vector<int64_t> layers = {6, 24};
  int64_t d = 8;
  double std = 0.1;
  uint64_t seed = 42;
  std::vector<std::string> weights;
  bool json = false;
  bool brief = false;
  std::optional<std::string> plot;
};

struct Run {
  lab::LinearGradflow r;
  std::string source;  // the weights file, or empty for the generator
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// An (L, d, d) float32 or float64 array from a .npy file.
Run run_file(const std::string& path) {
  const io::Array a = io::read_npy(path);
  require(a.dtype == io::DType::f64 || a.dtype == io::DType::f32, kFn, path, ": weights must be float64 or float32, got ",
          io::npy_descr(a.dtype));
  require(a.shape.size() == 3 && a.shape[1] == a.shape[2], kFn, path, ": weights must have shape (L, d, d), got ",
          shape_text(a.shape));
  require(a.shape[0] >= 1 && a.shape[1] >= 1, kFn, path, ": weights must have at least one layer of d >= 1, got ",
          shape_text(a.shape));
  for (const double v : a.values) require(std::isfinite(v), kFn, path, ": weights hold NaN or infinity");
  return {lab::linear_gradflow(a.values, a.shape[0], a.shape[1]), path};
}

void print_seed_lines(const std::vector<Run>& runs) {
  // The seeds' print: f"{n_layers} layers: gradient size without residual {:.2e}, with residual {:.2f}"
  for (const Run& run : runs)
    std::cout << run.r.layers << " layers: gradient size without residual " << fmt_e(run.r.plain, 2)
              << ", with residual " << fmt_f(run.r.residual, 2) << "\n";
}

void print_profiles(const std::vector<Run>& runs) {
  constexpr int kWidth = 24;
  for (const Run& run : runs) {
    const auto& p = run.r.profile_plain;
    const auto& q = run.r.profile_residual;
    double lo = INFINITY, hi = 0;
    for (const auto* v : {&p, &q})
      for (const double x : *v)
        if (x > 0 && std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
    std::cout << "\n" << run.r.layers << " layers, d = " << run.r.d
              << (run.source.empty() ? "" : " (" + run.source + ")")
              << ": gradient norm at the input of each layer, top to bottom";
    if (hi > 0) std::cout << " (bars on a log scale, " << fmt_e(lo, 1) << " .. " << fmt_e(hi, 1) << ")";
    std::cout << "\n  layer  " << std::string("without residual") << std::string(kWidth - 6, ' ')
              << "with residual\n";
    for (auto k = static_cast<int64_t>(p.size()) - 1; k >= 0; --k) {
      const auto i = static_cast<size_t>(k);
      const std::string name = k == run.r.layers ? "top" : std::to_string(k);
      std::cout << std::string(7 - std::min<size_t>(7, name.size()), ' ') << name << "  " << fmt_e(p[i], 2) << " "
                << bar(log_fraction(p[i], lo, hi), kWidth) << "  " << fmt_e(q[i], 2) << " "
                << bar(log_fraction(q[i], lo, hi), kWidth) << "\n";
    }
  }
}

void print_json(const std::vector<Run>& runs, const LinearOptions& o) {
  nlohmann::ordered_json j;
  j["runs"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < runs.size(); ++k) {
    const Run& run = runs[k];
    nlohmann::ordered_json r;
    r["layers"] = run.r.layers;
    r["d"] = run.r.d;
    r["plain"] = run.r.plain;
    r["residual"] = run.r.residual;
    r["profile_plain"] = run.r.profile_plain;
    r["profile_residual"] = run.r.profile_residual;
    if (run.source.empty())
      r["weights"] = {{"generator", "philox-normal"}, {"std", o.std}, {"seed", o.seed}, {"run", k}};
    else
      r["weights"] = run.source;
    j["runs"].push_back(r);
  }
  std::cout << j.dump() << "\n";
}

void write_plot(const std::vector<Run>& runs, const std::string& path) {
  io::LineChart c;
  c.title = "Gradient norm through a stack of linear layers: y = W x vs y = x + W x";
  c.x_label = "layer input (0 = bottom; the gradient of ones arrives at the top)";
  c.y_label = "||gradient||";
  c.log_y = true;
  for (const Run& run : runs) {
    std::vector<double> x(run.r.profile_plain.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
    const std::string n = std::to_string(run.r.layers) + " layers";
    c.series.push_back({n + ", no residual", x, run.r.profile_plain});
    c.series.push_back({n + ", residual", x, run.r.profile_residual});
  }
  io::write_line_chart(path, c);
}

int run_linear(const LinearOptions& o) {
  std::vector<Run> runs;
  if (!o.weights.empty()) {
    for (const std::string& path : o.weights) runs.push_back(run_file(path));
  } else {
    for (size_t k = 0; k < o.layers.size(); ++k) {
      const std::vector<double> w = lab::linear_gradflow_weights(o.layers[k], o.d, o.std, o.seed, k);
      runs.push_back({lab::linear_gradflow(w, o.layers[k], o.d), ""});
    }
  }
  if (o.plot) write_plot(runs, *o.plot);  // the file first: if it fails, nothing was printed
  if (o.json) {
    print_json(runs, o);
  } else {
    print_seed_lines(runs);
    if (!o.brief) print_profiles(runs);
  }
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

Runner add_linear(CLI::App& gradflow) {
  auto o = std::make_shared<LinearOptions>();
  CLI::App* sub = gradflow.add_subcommand(
      "linear", "The seeds' experiment: a gradient of ones carried down L linear layers, y = W x vs y = x + W x");
  sub->footer(
      "Each layer's Jacobian is W (plain) or I + W (residual); the gradient at the top is a vector of ones\n"
      "(norm sqrt(d)) and is carried down by W^T or (I + W)^T, in float64.\n"
      "Weights: --weights FILE.npy takes an (L, d, d) float64 or float32 array in forward order (index 0 =\n"
      "the bottom layer), as np.save(FILE, np.stack(Ws)) writes it; repeat it for several runs. The seeds'\n"
      "weights (rng = np.random.default_rng(42); Ws = [rng.normal(0, 0.1, (8, 8)) for _ in range(L)], 6 then\n"
      "24 layers from the same rng) give the seeds' lines exactly. Without --weights, run k (k = 0, 1, ... over\n"
      "--layers) draws its L*d*d weights N(0, std^2) from addnorm's generator: Philox4x32-10 with Box-Muller\n"
      "(nn::init_normal) on the stream mix_seed(seed, k); not NumPy's PCG64, so the numbers differ from the\n"
      "seeds' while telling the same story.\n"
      "--json: {\"runs\": [{\"layers\", \"d\", \"plain\", \"residual\", \"profile_plain\", \"profile_residual\",\n"
      "\"weights\"}]}; plain/residual: the gradient norm at the bottom; profile_*: the norm at the input of\n"
      "layer k for k = 0..L-1, then at the top (L + 1 values, bottom first); weights: the file, or\n"
      "{\"generator\", \"std\", \"seed\", \"run\"}. See docs/gradflow.md.\n"
      "Examples:\n"
      "  addnorm gradflow linear\n"
      "  addnorm gradflow linear --weights seeds6.npy --weights seeds24.npy --plot linear.svg");
  auto* layers = sub->add_option("--layers", o->layers, "Depths, comma-separated: one run each")
                     ->delimiter(',')
                     ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
                     ->type_name("L,L,...")
                     ->default_str("6,24");
  auto* d = sub->add_option("--d", o->d, "Width of every layer")
                ->check(CLI::Range(int64_t{1}, int64_t{4096}))
                ->capture_default_str();
  auto* std_opt = sub->add_option("--std", o->std, "Standard deviation of the generated weights")
                      ->check(CLI::Range(0.0, 1e6))
                      ->capture_default_str();
  auto* seed = sub->add_option("--seed", o->seed, "Seed of the generated weights")->capture_default_str();
  auto* weights = sub->add_option("--weights", o->weights, "An (L, d, d) .npy of weights in forward order (repeatable)")
                      ->type_name("FILE.npy");
  for (auto* opt : {layers, d, std_opt, seed}) weights->excludes(opt);
  sub->add_flag("--json", o->json, "Print one JSON object (see below) instead of the text");
  sub->add_flag("--brief", o->brief, "Print only the seeds' lines, not the per-layer tables");
  sub->add_option("--plot", o->plot, "Write an SVG chart of the per-layer gradient norms (log scale)")
      ->type_name("FILE.svg");
  return [o] { return run_linear(*o); };
}

}  // namespace addnorm::cli::gradflow
