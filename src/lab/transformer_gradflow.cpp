// Gradient flow through transformer stacks at initialization: one sample's forward, backward and
// measurements, and the average over samples. See include/addnorm/lab/transformer_gradflow.hpp.
#include "addnorm/lab/transformer_gradflow.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"
#include "addnorm/nn/loss.hpp"

namespace addnorm::lab {
namespace {

constexpr const char* kFn = "measure_gradflow_sample";

// The per-layer groups, in report order.
constexpr const char* kGroups[] = {"attention", "ffn_w1", "ffn_w2", "ffn_bias", "norm", "rezero"};
constexpr const char* kModelGroups[] = {"embedding", "final_norm", "readout"};

// The group of a parameter's name within its layer (e.g. "ffn.linear2.weight" -> "ffn_w2").
std::string layer_group(const std::string& local) {
  if (local.rfind("self_attn.", 0) == 0) return "attention";
  if (local == "ffn.linear1.weight") return "ffn_w1";
  if (local == "ffn.linear2.weight") return "ffn_w2";
  if (local.rfind("ffn.", 0) == 0) return "ffn_bias";
  if (local.rfind("rezero", 0) == 0) return "rezero";
  if (local.rfind("norm", 0) == 0) return "norm";
  fail(kFn, "parameter '", local, "' belongs to no group");
}

template <class T>
double sum_sq(const std::vector<T>& v) {
  double s = 0;
  for (const T x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}

// Mean over rows of the squared norm of each row.
template <class T>
double mean_row_norm_sq(View2D<const T> x) {
  double s = 0;
  for (int64_t r = 0; r < x.rows(); ++r)
    for (int64_t c = 0; c < x.cols(); ++c) s += static_cast<double>(x(r, c)) * static_cast<double>(x(r, c));
  return s / static_cast<double>(x.rows());
}

// Post and deepnorm: mean over tokens of ||alpha h + FFN(h)||^2, the input of the layer's last
// norm, by running the layer's first box and its FFN on x (the layer's forward that follows
// overwrites what this saves in the modules).
template <class T>
double probe_sum_norm_sq(nn::EncoderLayer<T>& layer, View2D<const T> x, int64_t batch, bool causal, std::vector<T>& a,
                         std::vector<T>& h, std::vector<T>& f) {
  const int64_t rows = x.rows(), d = x.cols();
  a.resize(static_cast<size_t>(rows * d));
  h.resize(a.size());
  f.resize(a.size());
  const View2D<T> av(a.data(), rows, d), hv(h.data(), rows, d), fv(f.data(), rows, d);
  const View2D<const T> u1 = layer.add1.input(x, {}, true);
  layer.self_attn.forward(av, u1, u1, batch, causal, {}, DropoutSpec{});
  layer.add1.output(hv, x, View2D<const T>(av), {}, DropoutSpec{}, true);
  const View2D<const T> u2 = layer.add2.input(View2D<const T>(hv), {}, true);
  layer.ffn.forward(fv, u2, DropoutSpec{});
  const double alpha = layer.config().alpha;
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double v = alpha * static_cast<double>(h[i]) + static_cast<double>(f[i]);
    s += v * v;
  }
  return s / static_cast<double>(rows);
}

Spread spread_of(const std::vector<std::vector<double>>& samples) {
  Spread out;
  if (samples.empty()) return out;
  const size_t n = samples.size(), m = samples[0].size();
  out.mean.assign(m, 0.0);
  out.sd.assign(m, 0.0);
  for (size_t j = 0; j < m; ++j) {
    double s = 0;
    for (const auto& v : samples) s += v[j];
    const double mean = s / static_cast<double>(n);
    double q = 0;
    for (const auto& v : samples) q += (v[j] - mean) * (v[j] - mean);
    out.mean[j] = mean;
    out.sd[j] = n > 1 ? std::sqrt(q / static_cast<double>(n - 1)) : 0.0;
  }
  return out;
}

}  // namespace

template <class T>
GradflowSample measure_gradflow_sample(GradflowModel<T>& m, const GradflowBatch& b,
                                       const TransformerGradflowConfig& c) {
  c.check();
  const int64_t rows = c.batch * c.seq, d = c.d_model, n = c.layers;
  const bool xiong = c.setup == GradflowSetup::xiong, causal = !xiong;
  require(static_cast<int64_t>(m.stack.layers.size()) == n, kFn, "the model has ", m.stack.layers.size(),
          " layers, the config ", n);
  require(static_cast<int64_t>(b.targets.size()) == rows, kFn, "the batch has ", b.targets.size(),
          " targets, expected batch * seq = ", rows);
  require(xiong ? static_cast<int64_t>(b.inputs.size()) == rows * d : static_cast<int64_t>(b.tokens.size()) == rows,
          kFn, "the batch's ", xiong ? "inputs" : "tokens", " do not match the config");

  nn::ParameterList<T> params;
  m.embedding.parameters(params, "embedding.");
  m.stack.parameters(params, "stack.");
  m.readout.parameters(params, "readout.");
  nn::zero_grad(params);

  GradflowSample s;
  // Forward, keeping every layer's output.
  std::vector<T> x0(static_cast<size_t>(rows * d));
  const View2D<T> x0v(x0.data(), rows, d);
  if (xiong)
    std::transform(b.inputs.begin(), b.inputs.end(), x0.begin(), [](double v) { return static_cast<T>(v); });
  else
    m.embedding.forward(x0v, b.tokens);
  s.input_norm_sq = mean_row_norm_sq<T>(x0v);
  std::vector<std::vector<T>> outs(static_cast<size_t>(n), std::vector<T>(x0.size()));
  const auto out = [&](int64_t i) { return View2D<T>(outs[static_cast<size_t>(i)].data(), rows, d); };
  const auto in = [&](int64_t i) { return View2D<const T>(i == 0 ? x0v : out(i - 1)); };
  const bool probe = c.placement == nn::Placement::post || c.placement == nn::Placement::deepnorm;
  std::vector<T> pa, ph, pf;
  const nn::Mode mode{true, 0};  // training (batch norm's batch statistics); dropout is 0
  for (int64_t i = 0; i < n; ++i) {
    auto& layer = m.stack.layers[static_cast<size_t>(i)];
    if (probe) s.sum_norm_sq.push_back(probe_sum_norm_sq(layer, in(i), c.batch, causal, pa, ph, pf));
    layer.forward(out(i), in(i), c.batch, {}, causal, mode, static_cast<uint64_t>(i));
    s.hidden_norm_sq.push_back(mean_row_norm_sq<T>(out(i)));
  }
  std::vector<T> y(x0.size()), logits(static_cast<size_t>(rows * c.vocab)), dlogits(logits.size());
  const View2D<T> yv(y.data(), rows, d), zv(logits.data(), rows, c.vocab), dzv(dlogits.data(), rows, c.vocab);
  m.stack.norm.forward(yv, in(n), {}, true);
  m.readout.forward(zv, yv);
  nn::CrossEntropy<T> loss;
  s.loss = loss.forward(zv, b.targets);
  loss.backward(dzv, zv);

  // Backward: readout, final norm, the layers from the top, the embedding.
  std::vector<T> g0(x0.size()), g1(x0.size());
  m.readout.backward(View2D<T>(g0.data(), rows, d), dzv, yv);
  if (m.stack.norm.type() != nn::NormType::none) {
    m.stack.norm.backward(View2D<T>(g1.data(), rows, d), View2D<const T>(g0.data(), rows, d), in(n), {});
    g0.swap(g1);
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    m.stack.layers[static_cast<size_t>(i)].backward(View2D<T>(g1.data(), rows, d), View2D<const T>(g0.data(), rows, d),
                                                    in(i));
    g0.swap(g1);
  }
  if (!xiong) m.embedding.backward(View2D<const T>(g0.data(), rows, d), b.tokens);

  // Group norms.
  std::vector<std::vector<double>> sq(std::size(kGroups), std::vector<double>(static_cast<size_t>(n), 0.0));
  std::vector<bool> present(std::size(kGroups), false);
  std::vector<double> model_sq(std::size(kModelGroups), 0.0);
  std::vector<bool> model_present(std::size(kModelGroups), false);
  const std::string layers_prefix = "stack.layers.";
  for (const auto& e : params) {
    const double g = sum_sq(e.param->grad);
    if (e.name.rfind(layers_prefix, 0) == 0) {
      const size_t dot = e.name.find('.', layers_prefix.size());
      const auto layer = static_cast<size_t>(std::stoll(e.name.substr(layers_prefix.size(), dot - layers_prefix.size())));
      const std::string group = layer_group(e.name.substr(dot + 1));
      const auto k = static_cast<size_t>(std::find(std::begin(kGroups), std::end(kGroups), group) - std::begin(kGroups));
      sq[k][layer] += g;
      present[k] = true;
    } else {
      const size_t k = e.name.rfind("embedding.", 0) == 0 ? 0 : e.name.rfind("stack.norm.", 0) == 0 ? 1 : 2;
      model_sq[k] += g;
      model_present[k] = true;
    }
  }
  for (size_t k = 0; k < std::size(kGroups); ++k) {
    if (!present[k]) continue;
    s.group_names.emplace_back(kGroups[k]);
    for (double& v : sq[k]) v = std::sqrt(v);
    s.groups.push_back(std::move(sq[k]));
  }
  for (size_t k = 0; k < std::size(kModelGroups); ++k)
    if (model_present[k]) {
      s.model_group_names.emplace_back(kModelGroups[k]);
      s.model_groups.push_back(std::sqrt(model_sq[k]));
    }
  return s;
}

const Spread* TransformerGradflow::group(std::string_view name) const {
  for (size_t k = 0; k < group_names.size(); ++k)
    if (group_names[k] == name) return &groups[k];
  return nullptr;
}

template <class T>
TransformerGradflow transformer_gradflow(const TransformerGradflowConfig& config, int64_t seeds, uint64_t seed) {
  config.check();
  require(seeds >= 1, "transformer_gradflow", "seeds must be >= 1, got ", seeds);
  std::vector<GradflowSample> samples;
  for (int64_t k = 0; k < seeds; ++k) {
    const auto s = static_cast<uint64_t>(k);
    GradflowModel<T> model = make_gradflow_model<T>(config, nn::mix_seed(seed, 2 * s));
    const GradflowBatch batch = make_gradflow_batch(config, nn::mix_seed(seed, 2 * s + 1));
    samples.push_back(measure_gradflow_sample(model, batch, config));
  }
  const auto collect = [&](auto get) {
    std::vector<std::vector<double>> v;
    for (const auto& s : samples) v.push_back(get(s));
    return spread_of(v);
  };
  TransformerGradflow r;
  r.config = config;
  r.seeds = seeds;
  r.loss = collect([](const GradflowSample& s) { return std::vector<double>{s.loss}; });
  r.input_norm_sq = collect([](const GradflowSample& s) { return std::vector<double>{s.input_norm_sq}; });
  r.hidden_norm_sq = collect([](const GradflowSample& s) { return s.hidden_norm_sq; });
  r.sum_norm_sq = collect([](const GradflowSample& s) { return s.sum_norm_sq; });
  r.group_names = samples[0].group_names;
  for (size_t k = 0; k < r.group_names.size(); ++k)
    r.groups.push_back(collect([k](const GradflowSample& s) { return s.groups[k]; }));
  r.model_group_names = samples[0].model_group_names;
  for (size_t k = 0; k < r.model_group_names.size(); ++k)
    r.model_groups.push_back(collect([k](const GradflowSample& s) { return std::vector<double>{s.model_groups[k]}; }));
  return r;
}

#define ADDNORM_INSTANTIATE(T)                                                                                   \
  template GradflowSample measure_gradflow_sample<T>(GradflowModel<T>&, const GradflowBatch&,                     \
                                                     const TransformerGradflowConfig&);                          \
  template TransformerGradflow transformer_gradflow<T>(const TransformerGradflowConfig&, int64_t, uint64_t);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm::lab
