// The C++ side of the encoder-decoder model's PyTorch parity check (seq2seq_parity.py). Reads a
// case folder written by the script: config.txt ("key value" lines), src.npy and src_valid.npy
// (B*S), tgt.npy and targets.npy (B*T), and one <parameter name>.npy per parameter of
// Seq2SeqModel. Writes names.txt (the model's parameter names, one a line, so that the script can
// tell a parameter missing on either side), then runs forward, loss and backward and writes
// logits.npy, loss.npy and grad.<name>.npy; then runs `steps` training steps (zero_grad, forward in
// training mode with every dropout probability 0, loss, backward, clip_grad_norm, AdamW step) from
// the same start and writes losses.npy (one loss per step, before its update), norms.npy (the
// gradient norms) and after.<name>.npy. Exits non-zero with a message on any error.
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "addnorm/io/npy.hpp"
#include "addnorm/nn/activation.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/optimizer.hpp"
#include "addnorm/nn/residual.hpp"
#include "addnorm/nn/seq2seq_model.hpp"

namespace {

namespace nn = addnorm::nn;
namespace io = addnorm::io;

struct Case {
  std::string dir;
  std::map<std::string, std::string> config;
  [[nodiscard]] const std::string& get(const std::string& k) const {
    const auto it = config.find(k);
    if (it == config.end()) throw std::runtime_error("config.txt lacks " + k);
    return it->second;
  }
  [[nodiscard]] int64_t num(const std::string& k) const { return std::stoll(get(k)); }
  [[nodiscard]] double real(const std::string& k) const { return std::stod(get(k)); }
  [[nodiscard]] io::Array array(const std::string& name) const { return io::read_npy(dir + "/" + name + ".npy"); }
  template <class T>
  void write(const std::string& name, const std::vector<T>& v, std::vector<int64_t> shape) const {
    const std::vector<double> d(v.begin(), v.end());
    io::write_npy(dir + "/" + name + ".npy", d, shape, io::DType::f64);
  }
};

std::vector<int64_t> ints(const io::Array& a) { return {a.values.begin(), a.values.end()}; }

template <class T>
void run(const Case& c) {
  nn::Seq2SeqConfig config;
  config.vocab = c.num("vocab");
  config.encoder_layers = c.num("encoder_layers");
  config.decoder_layers = c.num("decoder_layers");
  config.layer =
      nn::make_layer_config(c.num("d_model"), c.num("heads"), c.num("d_ff"), nn::parse_activation(c.get("activation")),
                            nn::parse_placement(c.get("placement")));
  config.layer.norm.eps = c.real("eps");
  config.layer.dropout = config.layer.attn_dropout = config.embedding_dropout = 0.0;
  config.tied = c.num("tied") != 0;
  config.scale_embedding = c.num("scale_embedding") != 0;
  config.loss = {c.real("label_smoothing"), c.num("ignore_index")};
  const int64_t batch = c.num("batch");
  const std::vector<int64_t> src = ints(c.array("src")), tgt = ints(c.array("tgt")), targets = ints(c.array("targets"));
  std::vector<uint8_t> src_valid;
  for (const double v : c.array("src_valid").values) src_valid.push_back(v != 0 ? 1 : 0);
  const auto rows = static_cast<int64_t>(tgt.size());

  nn::Seq2SeqModel<T> model(config, 1);
  nn::ParameterList<T> params;
  model.parameters(params);
  {
    std::ofstream names(c.dir + "/names.txt");
    for (const auto& e : params) names << e.name << '\n';
    if (!names) throw std::runtime_error("cannot write names.txt");
  }
  for (auto& e : params) {
    const io::Array a = c.array(e.name);
    if (static_cast<int64_t>(a.values.size()) != e.param->numel())
      throw std::runtime_error("parameter " + e.name + " has the wrong size");
    e.param->value.assign(a.values.begin(), a.values.end());
  }
  nn::zero_grad(params);
  const auto logits = model.forward(src, src_valid, tgt, {}, batch, nn::Mode{false, 0});
  c.write("logits", std::vector<T>(logits.data(), logits.data() + rows * config.vocab), {rows, config.vocab});
  c.write("loss", std::vector<double>{model.loss(targets)}, {1});
  model.backward();
  for (const auto& e : params) c.write("grad." + e.name, e.param->grad, e.param->shape);

  nn::OptimizerConfig oc;
  oc.kind = nn::OptimizerKind::adamw;
  oc.beta1 = c.real("beta1");
  oc.beta2 = c.real("beta2");
  oc.eps = c.real("adam_eps");
  oc.weight_decay = c.real("weight_decay");
  nn::Optimizer<T> opt(oc, params);
  std::vector<double> losses, norms;
  for (int64_t s = 0; s < c.num("steps"); ++s) {
    nn::zero_grad(params);
    // Training mode (every dropout probability is 0, so the steps are deterministic).
    model.forward(src, src_valid, tgt, {}, batch, nn::Mode{true, static_cast<uint64_t>(s)});
    losses.push_back(model.loss(targets));
    model.backward();
    norms.push_back(nn::clip_grad_norm(params, c.real("max_norm")));
    opt.step(c.real("lr"));
  }
  c.write("losses", losses, {static_cast<int64_t>(losses.size())});
  c.write("norms", norms, {static_cast<int64_t>(norms.size())});
  for (const auto& e : params) c.write("after." + e.name, e.param->value, e.param->shape);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASE_DIR\n", argv[0]);
    return 2;
  }
  try {
    Case c;
    c.dir = argv[1];
    std::ifstream cfg(c.dir + "/config.txt");
    if (!cfg) throw std::runtime_error("cannot read " + c.dir + "/config.txt");
    for (std::string k, v; cfg >> k >> v;) c.config[k] = v;
    if (c.get("dtype") == "f32") {
      run<float>(c);
    } else {
      run<double>(c);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seq2seq_parity_run: %s\n", e.what());
    return 1;
  }
  return 0;
}
