// The C++ side of the GPT-style model's PyTorch parity check (gpt_parity.py). Reads a case folder
// written by the script: config.txt ("key value" lines), ids.npy and targets.npy (B*T), and one
// <parameter name>.npy per parameter of GptModel. The run itself (names.txt, logits, loss,
// gradients, five training steps) is parity::run_model in parity_case.hpp. Exits non-zero with a
// message on any error.
#include <vector>

#include "addnorm/nn/gpt_model.hpp"
#include "parity_case.hpp"

namespace {

namespace nn = addnorm::nn;

template <class T>
void run(const parity::Case& c) {
  nn::GptConfig config;
  config.vocab = c.num("vocab");
  config.max_len = c.num("max_len");
  config.layers = c.num("layers");
  config.layer = parity::layer_config(c, nn::Placement::pre);
  config.embedding_dropout = 0.0;
  config.tied = c.num("tied") != 0;
  config.loss = parity::loss_config(c);
  const int64_t batch = c.num("batch");
  const std::vector<int64_t> ids = c.ints("ids"), targets = c.ints("targets");
  nn::GptModel<T> model(config, 1);
  // Every dropout probability is 0: training mode is deterministic.
  const auto forward = [&](bool training, uint64_t step) {
    return model.forward(ids, batch, {}, nn::Mode{training, step});
  };
  parity::run_model<T>(c, model, forward, targets, static_cast<int64_t>(ids.size()), config.vocab);
}

}  // namespace

int main(int argc, char** argv) { return parity::main_of(argc, argv, "gpt_parity_run", run<float>, run<double>); }
