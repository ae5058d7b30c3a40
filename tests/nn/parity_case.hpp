// Shared by the model parity runners (gpt_parity_run.cpp, seq2seq_parity_run.cpp): a case folder
// written by the Python side (config.txt of "key value" lines and .npy arrays), and the common run
// of a model: load every parameter by name (names.txt lists the model's names, so the script can
// tell a parameter missing on either side), forward + loss + backward (logits.npy, loss.npy,
// grad.<name>.npy), then `steps` training steps (zero_grad, forward, loss, backward,
// clip_grad_norm, AdamW) from the same start (losses.npy, norms.npy, after.<name>.npy).
#pragma once

#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "addnorm/io/npy.hpp"
#include "addnorm/nn/activation.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/loss.hpp"
#include "addnorm/nn/optimizer.hpp"

namespace parity {

namespace nn = addnorm::nn;
namespace io = addnorm::io;

struct Case {
  std::string dir;
  std::map<std::string, std::string> config;

  explicit Case(std::string folder) : dir(std::move(folder)) {
    std::ifstream cfg(dir + "/config.txt");
    if (!cfg) throw std::runtime_error("cannot read " + dir + "/config.txt");
    for (std::string k, v; cfg >> k >> v;) config[k] = v;
  }
  [[nodiscard]] const std::string& get(const std::string& k) const {
    const auto it = config.find(k);
    if (it == config.end()) throw std::runtime_error("config.txt lacks " + k);
    return it->second;
  }
  [[nodiscard]] int64_t num(const std::string& k) const { return std::stoll(get(k)); }
  [[nodiscard]] double real(const std::string& k) const { return std::stod(get(k)); }
  [[nodiscard]] io::Array array(const std::string& name) const { return io::read_npy(dir + "/" + name + ".npy"); }
  [[nodiscard]] std::vector<int64_t> ints(const std::string& name) const {
    const io::Array a = array(name);
    return {a.values.begin(), a.values.end()};
  }
  template <class T>
  void write(const std::string& name, const std::vector<T>& v, std::vector<int64_t> shape) const {
    const std::vector<double> d(v.begin(), v.end());
    io::write_npy(dir + "/" + name + ".npy", d, shape, io::DType::f64);
  }
};

// The layer configuration the scripts write (d_model, heads, d_ff, activation, eps) with the given
// placement and every dropout off, and the loss configuration (label_smoothing, ignore_index).
inline nn::LayerConfig layer_config(const Case& c, nn::Placement placement) {
  nn::LayerConfig layer = nn::make_layer_config(c.num("d_model"), c.num("heads"), c.num("d_ff"),
                                                nn::parse_activation(c.get("activation")), placement);
  layer.norm.eps = c.real("eps");
  layer.dropout = layer.attn_dropout = 0.0;
  return layer;
}

inline nn::CrossEntropyConfig loss_config(const Case& c) { return {c.real("label_smoothing"), c.num("ignore_index")}; }

// model: has parameters(list), loss(targets), backward(). forward(training, step) runs the
// model's forward and returns its logits view; rows x vocab is their shape.
template <class T, class Model, class Forward>
void run_model(const Case& c, Model& model, Forward&& forward, const std::vector<int64_t>& targets, int64_t rows,
               int64_t vocab) {
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
  const auto logits = forward(false, 0);
  c.write("logits", std::vector<T>(logits.data(), logits.data() + rows * vocab), {rows, vocab});
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
    forward(true, static_cast<uint64_t>(s));
    losses.push_back(model.loss(targets));
    model.backward();
    norms.push_back(nn::clip_grad_norm(params, c.real("max_norm")));
    opt.step(c.real("lr"));
  }
  c.write("losses", losses, {static_cast<int64_t>(losses.size())});
  c.write("norms", norms, {static_cast<int64_t>(norms.size())});
  for (const auto& e : params) c.write("after." + e.name, e.param->value, e.param->shape);
}

// main() of a runner: `prog CASE_DIR`; run<float> or run<double> by config's dtype.
template <class RunF32, class RunF64>
int main_of(int argc, char** argv, const char* prog, RunF32&& run_f32, RunF64&& run_f64) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASE_DIR\n", argv[0]);
    return 2;
  }
  try {
    const Case c(argv[1]);
    if (c.get("dtype") == "f32")
      run_f32(c);
    else
      run_f64(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
  return 0;
}

}  // namespace parity
