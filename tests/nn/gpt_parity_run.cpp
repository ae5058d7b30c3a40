// The C++ side of the GPT-style model's PyTorch parity check (gpt_parity.py). Reads a case folder
// written by the script: config.txt ("key value" lines), ids.npy and targets.npy (B*T), and one
// <parameter name>.npy per parameter of GptModel. Runs forward, loss and backward and writes
// logits.npy, loss.npy and grad.<name>.npy; then runs `steps` training steps (zero_grad, forward,
// loss, backward, clip_grad_norm, AdamW step) from the same start and writes losses.npy (one loss
// per step, before its update), norms.npy (the gradient norms) and after.<name>.npy. Exits
// non-zero with a message on any error.
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "addnorm/io/npy.hpp"
#include "addnorm/nn/gpt_model.hpp"
#include "addnorm/nn/optimizer.hpp"

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
  nn::GptConfig config;
  config.vocab = c.num("vocab");
  config.max_len = c.num("max_len");
  config.layers = c.num("layers");
  config.layer = nn::make_layer_config(c.num("d_model"), c.num("heads"), c.num("d_ff"),
                                       nn::parse_activation(c.get("activation")), nn::Placement::pre);
  config.layer.norm.eps = c.real("eps");
  config.layer.dropout = config.layer.attn_dropout = config.embedding_dropout = 0.0;
  config.tied = c.num("tied") != 0;
  config.loss = {c.real("label_smoothing"), c.num("ignore_index")};
  const int64_t batch = c.num("batch");
  const std::vector<int64_t> ids = ints(c.array("ids")), targets = ints(c.array("targets"));
  const auto rows = static_cast<int64_t>(ids.size());

  nn::GptModel<T> model(config, 1);
  nn::ParameterList<T> params;
  model.parameters(params);
  for (auto& e : params) {
    const io::Array a = c.array(e.name);
    if (static_cast<int64_t>(a.values.size()) != e.param->numel())
      throw std::runtime_error("parameter " + e.name + " has the wrong size");
    e.param->value.assign(a.values.begin(), a.values.end());
  }
  nn::zero_grad(params);
  const auto logits = model.forward(ids, batch, {}, nn::Mode{false, 0});
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
    model.forward(ids, batch, {}, nn::Mode{false, 0});
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
    for (std::string k, v; cfg >> k >> v;) c.config[k] = v;
    if (c.get("dtype") == "f32") {
      run<float>(c);
    } else {
      run<double>(c);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_parity_run: %s\n", e.what());
    return 1;
  }
  return 0;
}
