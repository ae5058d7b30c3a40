// The C++ side of the encoder-decoder model's PyTorch parity check (seq2seq_parity.py). Reads a
// case folder written by the script: config.txt ("key value" lines), src.npy and src_valid.npy
// (B*S), tgt.npy and targets.npy (B*T), and one <parameter name>.npy per parameter of
// Seq2SeqModel. The run itself (names.txt, logits, loss, gradients, the
// training steps in training mode with every dropout probability 0) is parity::run_model in
// parity_case.hpp. Exits non-zero with a message on any error.
#include <vector>

#include "addnorm/nn/residual.hpp"
#include "addnorm/nn/seq2seq_model.hpp"
#include "parity_case.hpp"

namespace {

namespace nn = addnorm::nn;

template <class T>
void run(const parity::Case& c) {
  nn::Seq2SeqConfig config;
  config.vocab = c.num("vocab");
  config.encoder_layers = c.num("encoder_layers");
  config.decoder_layers = c.num("decoder_layers");
  config.layer = parity::layer_config(c, nn::parse_placement(c.get("placement")));
  config.embedding_dropout = 0.0;
  config.tied = c.num("tied") != 0;
  config.scale_embedding = c.num("scale_embedding") != 0;
  config.loss = parity::loss_config(c);
  const int64_t batch = c.num("batch");
  const std::vector<int64_t> src = c.ints("src"), tgt = c.ints("tgt"), targets = c.ints("targets");
  std::vector<uint8_t> src_valid;
  for (const double v : c.array("src_valid").values) src_valid.push_back(v != 0 ? 1 : 0);
  nn::Seq2SeqModel<T> model(config, 1);
  const auto forward = [&](bool training, uint64_t step) {
    return model.forward(src, src_valid, tgt, {}, batch, nn::Mode{training, step});
  };
  parity::run_model<T>(c, model, forward, targets, static_cast<int64_t>(tgt.size()), config.vocab);
}

}  // namespace

int main(int argc, char** argv) {
  return parity::main_of(argc, argv, "seq2seq_parity_run", run<float>, run<double>);
}
