// addnorm gradflow transformer: options and orchestration. For every norm kind, placement and
// depth, lab::transformer_gradflow measures the model at initialization over the seeds; the
// report (table, claims, JSON, CSV, SVG) is in gradflow_report.cpp.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "addnorm/io/atomic_file.hpp"
#include "addnorm/lab/transformer_gradflow.hpp"
#include "gradflow.hpp"

namespace addnorm::cli::gradflow {
namespace {

struct TransformerOptions {
  std::vector<std::string> placements = {"post", "pre", "sandwich", "deepnorm", "rezero", "none"};
  std::vector<std::string> norms = {"layer"};
  std::vector<int64_t> layers = {6, 12, 24, 48};
  int64_t d_model = 64, heads = 4, d_ff = 256, seq = 32, batch = 8, vocab = 256, seeds = 5;
  uint64_t seed = 0;
  double eps = 1e-5;
  std::string setup = "standard";
  std::string dtype = "f32";
  bool json = false;
  std::optional<std::string> csv, plot;
};

int run_transformer(const TransformerOptions& o) {
  TransformerReport rep;
  rep.base.d_model = o.d_model;
  rep.base.heads = o.heads;
  rep.base.d_ff = o.d_ff;
  rep.base.seq = o.seq;
  rep.base.batch = o.batch;
  rep.base.vocab = o.vocab;
  rep.base.eps = o.eps;
  rep.base.setup = lab::parse_gradflow_setup(o.setup);
  rep.seeds = o.seeds;
  rep.seed = o.seed;
  rep.dtype = o.dtype;
  rep.base.check();
  for (const std::string& norm : o.norms) {
    for (const std::string& placement : o.placements) {
      lab::TransformerGradflowConfig c = rep.base;
      c.placement = nn::parse_placement(placement);
      c.norm = nn::parse_norm_type(norm);
      // rezero and none have no norm: measured once, as norm "none".
      if (c.placement == nn::Placement::rezero || c.placement == nn::Placement::none) {
        if (&norm != &o.norms.front()) continue;
        c.norm = nn::NormType::none;
      }
      for (const int64_t depth : o.layers) {
        c.layers = depth;
        rep.results.push_back(o.dtype == "f64" ? lab::transformer_gradflow<double>(c, o.seeds, o.seed)
                                               : lab::transformer_gradflow<float>(c, o.seeds, o.seed));
      }
    }
  }
  // The files first: if writing fails, nothing was printed as if it had worked.
  if (o.csv) io::write_file_atomic(*o.csv, transformer_csv(rep));
  if (o.plot) write_transformer_plot(rep, *o.plot);
  if (o.json)
    print_transformer_json(rep, std::cout);
  else
    print_transformer_text(rep, std::cout);
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

Runner add_transformer(CLI::App& gradflow) {
  auto o = std::make_shared<TransformerOptions>();
  CLI::App* sub = gradflow.add_subcommand(
      "transformer", "Gradient and hidden-state norms of transformer stacks at initialization, per placement and depth");
  sub->footer(
      "The model: tokens -> embedding -> L encoder layers (causal self-attention) -> final norm (pre, sandwich)\n"
      "-> linear readout -> softmax cross-entropy against random next tokens (a random-token LM batch of\n"
      "--batch sequences of --seq tokens). One forward and backward per seed at initialization, no dropout;\n"
      "every number is the mean over the seeds, with the standard deviation (\u00b1). Measured: the loss, the\n"
      "Frobenius norm of the loss gradient of every parameter group of every layer (attention, ffn_w1,\n"
      "ffn_w2, ffn_bias, norm, rezero), the mean over tokens of ||x_l||^2 after every layer, and for post and\n"
      "deepnorm ||h + FFN(h)||^2, the input of the layer's last norm (Xiong's x^{post,5}).\n"
      "--setup standard: PyTorch's default inits, `--heads` heads, ReLU, DeepNet's alpha and beta for\n"
      "deepnorm (decoder-only row). --setup xiong: Xiong et al. 2020's setting: one head, W^Q = W^K = 0,\n"
      "W^V, W^O, W^1 ~ N(0, 1/d), W^2 ~ N(0, 1/d_ff) (1/d when --d-ff equals --d-model, as in the paper),\n"
      "zero biases, ReLU, Gaussian inputs x_0 ~ N(0, I), bidirectional attention.\n"
      "rezero and none have no norm: they are measured once, reported with norm \"none\".\n"
      "The text ends with claims from the literature next to what was measured; nothing is tuned to them.\n"
      "--json: {\"config\", \"results\": [{\"placement\", \"norm\", \"layers\", \"seeds\", \"loss\", \"loss_sd\",\n"
      "\"last_ffn_w2_grad_norm\", \"last_ffn_w2_grad_norm_sd\", \"ffn_w2_grad_norm\", \"ffn_w2_grad_norm_sd\"\n"
      "(per layer, bottom first), \"hidden_norm_sq\", \"hidden_norm_sq_sd\", \"sum_norm_sq\", \"sum_norm_sq_sd\",\n"
      "\"input_norm_sq\", \"groups\": {GROUP: {\"mean\": [...], \"sd\": [...]}}, \"model_groups\": {...}}]}.\n"
      "--csv: one row per (placement, norm, depth, layer). Both are described in docs/gradflow.md.\n"
      "--plot: the FFN W2 gradient norm of every layer at the deepest depth, one line per placement.\n"
      "Examples:\n"
      "  addnorm gradflow transformer --layers 6,12 --seeds 3\n"
      "  addnorm gradflow transformer --setup xiong --d-ff 64 --placements post,pre --plot w2.svg");
  const auto pos = CLI::Range(int64_t{1}, int64_t{1} << 20);
  sub->add_option("--placements", o->placements, "Placements, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"post", "pre", "sandwich", "peri", "deepnorm", "rezero", "none"}))
      ->type_name("post,pre,sandwich,deepnorm,rezero,none")
      ->default_str("post,pre,sandwich,deepnorm,rezero,none");
  sub->add_option("--norm", o->norms, "Norm kinds, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"layer", "rms", "batch", "scale", "none"}))
      ->type_name("layer|rms|batch|scale|none")
      ->default_str("layer");
  sub->add_option("--layers", o->layers, "Depths, comma-separated")
      ->delimiter(',')
      ->check(pos)
      ->type_name("L,L,...")
      ->default_str("6,12,24,48");
  sub->add_option("--d-model", o->d_model, "Model width d")->check(pos)->capture_default_str();
  auto* heads = sub->add_option("--heads", o->heads, "Attention heads (must divide d; xiong: 1)")
                    ->check(pos)
                    ->capture_default_str();
  sub->add_option("--d-ff", o->d_ff, "FFN width")->check(pos)->capture_default_str();
  sub->add_option("--seq", o->seq, "Tokens per sequence")->check(pos)->capture_default_str();
  sub->add_option("--batch", o->batch, "Sequences per batch")->check(pos)->capture_default_str();
  sub->add_option("--vocab", o->vocab, "Vocabulary of the random tokens")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--seeds", o->seeds, "Samples (model and batch) to average over")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Base seed of the samples")->capture_default_str();
  sub->add_option("--eps", o->eps, "eps of every norm")->check(CLI::Range(1e-30, 1.0))->default_str("1e-05");
  sub->add_option("--setup", o->setup, "Initialization and inputs: standard or xiong (see below)")
      ->check(CLI::IsMember({"standard", "xiong"}))
      ->type_name("standard|xiong")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Arithmetic: f32 (oneDNN GEMM) or f64")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->type_name("f32|f64")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON object (see below) instead of the text");
  sub->add_option("--csv", o->csv, "Also write the per-layer numbers as CSV")->type_name("FILE");
  sub->add_option("--plot", o->plot, "Write an SVG chart of the per-layer FFN W2 gradient norms")
      ->type_name("FILE.svg");
  sub->final_callback([o, heads] {
    if (o->setup == "standard" && o->d_model % o->heads != 0)
      throw CLI::ValidationError("--heads", "--heads " + std::to_string(o->heads) + " does not divide --d-model " +
                                                std::to_string(o->d_model));
    if (o->setup == "xiong" && heads->count() > 0 && o->heads != 1)
      throw CLI::ValidationError("--heads", "--setup xiong uses one head; leave --heads out or give 1");
    for (std::string& p : o->placements)
      if (p == "peri") p = "sandwich";
  });
  return [o] { return run_transformer(*o); };
}

}  // namespace addnorm::cli::gradflow
