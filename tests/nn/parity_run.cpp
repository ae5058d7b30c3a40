// The C++ side of the PyTorch parity check (torch_parity.py): reads a case directory written by
// the script (config.txt, manifest.txt, raw little-endian f64 tensors <name>.bin), runs one
// EncoderLayer or DecoderLayer forward and backward with loss = sum(y * r), and writes y, dx,
// dmemory and grad.<parameter name> back as .bin files with a manifest of its own (out.txt).
// Exits non-zero with a message on any error.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "addnorm/nn/decoder_layer.hpp"
#include "addnorm/nn/encoder_layer.hpp"

namespace {

using addnorm::View2D;
namespace nn = addnorm::nn;

struct Case {
  std::string dir;
  std::map<std::string, std::string> config;
  std::map<std::string, std::vector<double>> tensors;

  [[nodiscard]] const std::string& get(const std::string& k) const {
    const auto it = config.find(k);
    if (it == config.end()) throw std::runtime_error("config.txt lacks " + k);
    return it->second;
  }
  [[nodiscard]] int64_t num(const std::string& k) const { return std::stoll(get(k)); }
  [[nodiscard]] const std::vector<double>& tensor(const std::string& k) const {
    const auto it = tensors.find(k);
    if (it == tensors.end()) throw std::runtime_error("no tensor " + k);
    return it->second;
  }
};

Case read_case(const std::string& dir) {
  Case c;
  c.dir = dir;
  std::ifstream cfg(dir + "/config.txt");
  for (std::string k, v; cfg >> k >> v;) c.config[k] = v;
  std::ifstream man(dir + "/manifest.txt");
  for (std::string line; std::getline(man, line);) {
    std::istringstream ls(line);
    std::string name;
    ls >> name;
    int64_t n = 1;
    for (int64_t e; ls >> e;) n *= e;
    std::vector<double> v(static_cast<size_t>(n));
    std::ifstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
    if (!f) throw std::runtime_error("short read of " + name);
    c.tensors[name] = std::move(v);
  }
  return c;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

std::vector<uint8_t> mask(const Case& c, const std::string& name) {
  if (c.tensors.count(name) == 0) return {};
  std::vector<uint8_t> m;
  for (const double v : c.tensor(name)) m.push_back(v != 0 ? 1 : 0);
  return m;
}

template <class T>
void write(const Case& c, std::ofstream& out, const std::string& name, const std::vector<T>& v) {
  const std::vector<double> d(v.begin(), v.end());
  std::ofstream f(c.dir + "/out." + name + ".bin", std::ios::binary);
  f.write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size() * sizeof(double)));
  out << name << ' ' << d.size() << '\n';
}

template <class T, class Layer>
void load_parameters(const Case& c, Layer& layer, nn::ParameterList<T>& params) {
  layer.parameters(params, "");
  for (auto& e : params) {
    const auto& v = c.tensor(e.name);
    if (static_cast<int64_t>(v.size()) != e.param->numel())
      throw std::runtime_error("parameter " + e.name + " has the wrong size");
    e.param->value = cast<T>(v);
    e.param->zero_grad();
  }
}

template <class T>
void run(const Case& c) {
  nn::LayerConfig config;
  config.d_model = c.num("d_model");
  config.heads = c.num("heads");
  config.d_ff = c.num("d_ff");
  config.activation = nn::parse_activation(c.get("activation"));
  config.placement = c.num("norm_first") != 0 ? nn::Placement::pre : nn::Placement::post;
  config.norm.eps = std::stod(c.get("eps"));
  config.dropout = config.attn_dropout = 0.0;
  const int64_t batch = c.num("batch"), t = c.num("T"), d = config.d_model, rows = batch * t;
  const bool causal = c.num("causal") != 0;
  const auto x = cast<T>(c.tensor("x"));
  const auto r = cast<T>(c.tensor("r"));
  const auto valid = mask(c, "valid");
  std::vector<T> y(static_cast<size_t>(rows * d)), dx(y.size());
  nn::ParameterList<T> params;
  std::ofstream out(c.dir + "/out.txt");
  if (c.get("kind") == "encoder") {
    nn::EncoderLayer<T> layer(config, 1);
    load_parameters<T>(c, layer, params);
    layer.forward(View2D<T>(y.data(), rows, d), View2D<const T>(x.data(), rows, d), batch, valid, causal, {});
    layer.backward(View2D<T>(dx.data(), rows, d), View2D<const T>(r.data(), rows, d),
                   View2D<const T>(x.data(), rows, d));
    for (const auto& e : params) write(c, out, "grad." + e.name, e.param->grad);  // while layer lives
  } else {
    const int64_t mrows = batch * c.num("S");
    const auto memory = cast<T>(c.tensor("memory"));
    const auto memory_valid = mask(c, "memory_valid");
    std::vector<T> dmem(static_cast<size_t>(mrows * d), T(0));
    nn::DecoderLayer<T> layer(config, 1);
    load_parameters<T>(c, layer, params);
    layer.forward(View2D<T>(y.data(), rows, d), View2D<const T>(x.data(), rows, d),
                  View2D<const T>(memory.data(), mrows, d), batch, valid, memory_valid, causal, {});
    layer.backward(View2D<T>(dx.data(), rows, d), View2D<T>(dmem.data(), mrows, d),
                   View2D<const T>(r.data(), rows, d), View2D<const T>(x.data(), rows, d),
                   View2D<const T>(memory.data(), mrows, d));
    write(c, out, "dmemory", dmem);
    for (const auto& e : params) write(c, out, "grad." + e.name, e.param->grad);
  }
  write(c, out, "y", y);
  write(c, out, "dx", dx);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASE_DIR\n", argv[0]);
    return 2;
  }
  try {
    const Case c = read_case(argv[1]);
    if (c.get("dtype") == "f32") {
      run<float>(c);
    } else {
      run<double>(c);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity_run: %s\n", e.what());
    return 1;
  }
  return 0;
}
