// One training step of two small transformers, timed: forward + loss + backward + clipping +
// AdamW, at batch x seq tokens, reported as tokens per second (JSON lines, one per model).
//
//   encoder:  embedding + learned positions + 6 post-LN encoder layers (bidirectional) + tied head
//   decoder:  the same with pre-LN and causal self-attention (GPT-style), final LayerNorm
//   both:     d_model 256, 4 heads, d_ff 1024, ReLU, dropout 0.1 (attention, residual, embedding),
//             vocab 8192, cross-entropy with label smoothing 0.1, AdamW (lr 3e-4, wd 0.01), f32
//
// bench/train_compare runs this and the same models in PyTorch in one run and prints the ratio.
// Usage: addnorm_train_step [--threads N] [--steps N] [--warmup N] [--batch B] [--seq T]
//                           [--layers L] [--vocab V] [--models encoder,decoder]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "addnorm/core/parallel.hpp"
#include "addnorm/nn/gpt_model.hpp"
#include "addnorm/nn/optimizer.hpp"

namespace {

namespace nn = addnorm::nn;

struct Options {
  int threads = 2, steps = 5, warmup = 2;
  int64_t batch = 32, seq = 128, layers = 6, vocab = 8192, d_model = 256, heads = 4, d_ff = 1024;
  std::vector<std::string> models{"encoder", "decoder"};
};

double run(const std::string& which, const Options& o, double& loss_out) {
  nn::GptConfig c;
  c.vocab = o.vocab;
  c.max_len = o.seq;
  c.layers = o.layers;
  const bool decoder = which == "decoder";
  c.layer = nn::make_layer_config(o.d_model, o.heads, o.d_ff, nn::Activation::relu,
                                  decoder ? nn::Placement::pre : nn::Placement::post);
  c.causal = decoder;
  c.embedding_dropout = 0.1;
  c.loss = {0.1, -100};
  nn::GptModel<float> model(c, 1);
  nn::ParameterList<float> params;
  model.parameters(params);
  nn::OptimizerConfig oc;
  oc.kind = nn::OptimizerKind::adamw;
  oc.weight_decay = 0.01;
  nn::Optimizer<float> opt(oc, params);

  const int64_t rows = o.batch * o.seq;
  std::vector<int64_t> ids(static_cast<size_t>(rows)), targets(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    ids[static_cast<size_t>(i)] = (i * 7919 + 13) % o.vocab;
    targets[static_cast<size_t>(i)] = (i * 104729 + 7) % o.vocab;
  }
  std::vector<double> times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    nn::zero_grad(params);
    model.forward(ids, o.batch, {}, nn::Mode{true, static_cast<uint64_t>(s)});
    loss_out = model.loss(targets);
    model.backward();
    nn::clip_grad_norm(params, 1.0);
    opt.step(3e-4);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (s >= o.warmup) times.push_back(dt.count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];  // median
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"addnorm_train_step: one timed training step of two small transformers (JSON lines)"};
  app.add_option("--threads", o.threads, "threads")->check(CLI::Range(1, 1024));
  app.add_option("--steps", o.steps, "timed steps (the median is reported)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--layers", o.layers, "layers per model")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--vocab", o.vocab, "vocabulary size")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--models", o.models, "encoder, decoder or both")
      ->delimiter(',')
      ->check(CLI::IsMember({"encoder", "decoder"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    addnorm::set_num_threads(o.threads);
    for (const char* which : {"encoder", "decoder"}) {
      if (std::find(o.models.begin(), o.models.end(), which) == o.models.end()) continue;
      double loss = 0;
      const double t = run(which, o, loss);
      std::printf(
          "{\"impl\": \"addnorm\", \"model\": \"%s\", \"threads\": %d, \"batch\": %lld, \"seq\": %lld, "
          "\"seconds_per_step\": %.6f, \"tokens_per_second\": %.1f, \"loss\": %.6f}\n",
          which, o.threads, static_cast<long long>(o.batch), static_cast<long long>(o.seq), t,
          static_cast<double>(o.batch * o.seq) / t, loss);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "addnorm_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
