// addnorm_bench: Google Benchmark over every kernel of the library, for every element type the
// library instantiates (f32, f64, and bf16/f16 once they exist), on the transformer shapes of
// issue 4, with 1 and all threads.
//
//   addnorm_bench                                   everything (a few minutes)
//   addnorm_bench --benchmark_filter='layer_norm_fwd/f32/.*threads:2'
//
// Names are op/dtype/rows:R/d:D/threads:T. Times are wall-clock (UseRealTime: kernels run on
// OpenMP threads). bytes_per_second counts the (rows, d) arrays an op must read and write once
// (Kernel::bytes_per_elem); gamma/beta, statistics and parameter gradients are not counted. Buffers
// are allocated and filled once per benchmark, outside the timed loop, and kept across the
// repeated runs Google Benchmark makes of one benchmark.
#include <benchmark/benchmark.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "addnorm/core/parallel.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/double_backward.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "bench_common.hpp"

namespace addnorm::bench {
namespace {

struct Shape {
  int64_t rows, d;
};
// Issue 4's shapes: GPT-2 small activations, a wide layer, many short rows, a small batch, one
// token (latency).
constexpr Shape kShapes[] = {{8192, 768}, {4096, 4096}, {65536, 64}, {32, 1024}, {1, 512}};

// How many (rows, d) buffers a kernel needs: of T (inputs, outputs) and of float (the residual
// stream of the fused kernels with an f32 stream).
struct Needs {
  int in = 0, out = 0, f32_in = 0, f32_out = 0;
};

// The buffers of one benchmark: every (rows, d) array and every per-row / per-column vector an op
// may need, filled once.
template <class T>
struct Data {
  using S = stat_t<T>;
  int64_t rows, d;
  Buffer<T> a, b, c, out1, out2;  // (rows, d): inputs a, b, c; outputs out1, out2
  Buffer<float> fa, fb, fout;     // (rows, d) f32: inputs fa, fb; output fout
  Buffer<T> gamma, beta, dgamma, dbeta;
  Buffer<S> mean, rstd, run_mean, run_var;  // max(rows, d) each

  Data(Shape s, Needs needs)
      : rows(s.rows),
        d(s.d),
        gamma(d),
        beta(d),
        dgamma(d),
        dbeta(d),
        mean(std::max(rows, d)),
        rstd(std::max(rows, d)),
        run_mean(std::max(rows, d)),
        run_var(std::max(rows, d)) {
    const auto n = static_cast<size_t>(rows * d);
    Buffer<T>* in[] = {&a, &b, &c};
    for (int i = 0; i < needs.in; ++i) {
      *in[i] = Buffer<T>(n);
      fill_uniform(in[i]->span(), 11 + static_cast<uint64_t>(i), -2.0f, 3.0f);
    }
    Buffer<float>* fin[] = {&fa, &fb};
    for (int i = 0; i < needs.f32_in; ++i) {
      *fin[i] = Buffer<float>(n);
      fill_uniform(fin[i]->span(), 21 + static_cast<uint64_t>(i), -2.0f, 3.0f);
    }
    if (needs.out >= 1) out1 = Buffer<T>(n);
    if (needs.out >= 2) out2 = Buffer<T>(n);
    if (needs.f32_out >= 1) fout = Buffer<float>(n);
    fill_uniform(gamma.span(), 1, 0.5f, 1.5f);
    fill_uniform(beta.span(), 2, -0.5f, 0.5f);
    fill_uniform(mean.span(), 3, 0.4f, 0.6f);
    fill_uniform(rstd.span(), 4, 0.5f, 0.7f);
    fill_uniform(run_var.span(), 5, 0.9f, 1.1f);
  }
  View2D<T> view(const Buffer<T>& buf) const { return {buf.data(), rows, d}; }
  View2D<const T> cview(const Buffer<T>& buf) const { return {buf.data(), rows, d}; }
  View2D<float> fview(const Buffer<float>& buf) const { return {buf.data(), rows, d}; }
  View2D<const float> cfview(const Buffer<float>& buf) const { return {buf.data(), rows, d}; }
  std::span<S> m() const { return mean.span().first(rows); }
  std::span<S> r() const { return rstd.span().first(rows); }
};

// One slot: the data of the benchmark running now, kept across the runs Google Benchmark makes of
// it and freed when the next benchmark starts.
std::string g_slot_key;
std::shared_ptr<void> g_slot;

template <class T>
Data<T>& data_for(const std::string& key, Shape s, Needs needs) {
  if (g_slot_key != key) {
    g_slot.reset();  // free the previous benchmark's memory first
    g_slot = std::make_shared<Data<T>>(s, needs);
    g_slot_key = key;
  }
  return *static_cast<Data<T>*>(g_slot.get());
}

// An op: its name, the bytes it must read and write per element of (rows, d) (for bytes/s), the
// buffers it needs, and the call.
template <class T>
struct Kernel {
  const char* name;
  size_t bytes_per_elem;
  Needs needs;
  std::function<void(Data<T>&)> call;
};

template <class T>
std::vector<Kernel<T>> kernels() {
  using K = KernelSet<T>;
  constexpr size_t e = sizeof(T), f = sizeof(float);
  std::vector<Kernel<T>> ks;
  if constexpr (K::layer_norm_forward) {
    ks.push_back({"layer_norm_fwd", 2 * e, {1, 1}, [](Data<T>& w) {
                    layer_norm_forward<T>(w.view(w.out1), w.m(), w.r(), w.cview(w.a), w.gamma.cspan(), w.beta.cspan(),
                                          1e-5);
                  }});
  }
  if constexpr (K::layer_norm_backward) {
    // dx, dgamma, dbeta from dy = b, x = a.
    ks.push_back({"layer_norm_bwd", 3 * e, {2, 1}, [](Data<T>& w) {
                    layer_norm_backward<T>(w.view(w.out1), w.dgamma.span(), w.dbeta.span(), w.cview(w.b), w.cview(w.a),
                                           w.m(), w.r(), w.gamma.cspan());
                  }});
  }
  if constexpr (K::layer_norm_backward) {
    // dx only (frozen gamma and beta: no partials); an inline call of layer_norm_backward.
    ks.push_back({"layer_norm_bwd_dx", 3 * e, {2, 1}, [](Data<T>& w) {
                    layer_norm_backward_dx<T>(w.view(w.out1), w.cview(w.b), w.cview(w.a), w.m(), w.r(),
                                              w.gamma.cspan());
                  }});
  }
  if constexpr (K::rms_norm_forward) {
    ks.push_back({"rms_norm_fwd", 2 * e, {1, 1}, [](Data<T>& w) {
                    rms_norm_forward<T>(w.view(w.out1), w.r(), w.cview(w.a), w.gamma.cspan(), 1e-5);
                  }});
  }
  if constexpr (K::rms_norm_backward) {
    ks.push_back({"rms_norm_bwd", 3 * e, {2, 1}, [](Data<T>& w) {
                    rms_norm_backward<T>(w.view(w.out1), w.dgamma.span(), w.cview(w.b), w.cview(w.a), w.r(),
                                         w.gamma.cspan());
                  }});
  }
  if constexpr (K::rms_norm_backward) {
    ks.push_back({"rms_norm_bwd_dx", 3 * e, {2, 1}, [](Data<T>& w) {
                    rms_norm_backward_dx<T>(w.view(w.out1), w.cview(w.b), w.cview(w.a), w.r(), w.gamma.cspan());
                  }});
  }
  if constexpr (K::layer_norm_double_backward) {
    // gx, gdy, ggamma from ddx = c, ddgamma = gamma, ddbeta = beta, dy = b, x = a: reads three
    // arrays, writes two.
    ks.push_back({"layer_norm_double_bwd", 5 * e, {3, 2}, [](Data<T>& w) {
                    layer_norm_double_backward<T>(w.view(w.out1), w.view(w.out2), w.dgamma.span(), w.cview(w.c),
                                                  w.gamma.cspan(), w.beta.cspan(), w.cview(w.b), w.cview(w.a), w.m(),
                                                  w.r(), w.gamma.cspan());
                  }});
  }
  if constexpr (K::rms_norm_double_backward) {
    ks.push_back({"rms_norm_double_bwd", 5 * e, {3, 2}, [](Data<T>& w) {
                    rms_norm_double_backward<T>(w.view(w.out1), w.view(w.out2), w.dgamma.span(), w.cview(w.c),
                                                w.gamma.cspan(), w.cview(w.b), w.cview(w.a), w.r(), w.gamma.cspan());
                  }});
  }
  if constexpr (K::batch_norm_forward) {
    // Training mode with running statistics (rows >= 2 only; see register_all).
    ks.push_back({"batch_norm_fwd", 2 * e, {1, 1}, [](Data<T>& w) {
                    const auto d = static_cast<size_t>(w.d);
                    batch_norm_forward<T>(w.view(w.out1), w.mean.span().first(d), w.rstd.span().first(d),
                                          w.run_mean.span().first(d), w.run_var.span().first(d), w.cview(w.a), {},
                                          w.gamma.cspan(), w.beta.cspan(), BatchNormOptions{});
                  }});
  }
  if constexpr (K::batch_norm_backward) {
    ks.push_back({"batch_norm_bwd", 3 * e, {2, 1}, [](Data<T>& w) {
                    const auto d = static_cast<size_t>(w.d);
                    batch_norm_backward<T>(w.view(w.out1), w.dgamma.span(), w.dbeta.span(), w.cview(w.b), w.cview(w.a),
                                           {}, w.mean.span().first(d), w.rstd.span().first(d), w.gamma.cspan());
                  }});
  }
  if constexpr (K::add_norm_forward) {
    // Pre-norm: s = h + Dropout(f) (h = a, f = b), y = Norm(s); reads h, f, writes s, y.
    auto fwd = [](NormKind kind, double p, double alpha = 1.0) {
      return [kind, p, alpha](Data<T>& w) {
        AddNormOptions o;
        o.kind = kind;
        o.alpha = alpha;
        o.dropout.p = p;
        o.dropout.seed = 42;
        const std::span<stat_t<T>> mean = kind == NormKind::layer ? w.m() : std::span<stat_t<T>>{};
        add_norm_forward<T>(w.view(w.out1), w.view(w.out2), mean, w.r(), w.cview(w.a), w.cview(w.b), w.gamma.cspan(),
                            kind == NormKind::layer ? w.beta.cspan() : std::span<const T>{}, o);
      };
    };
    ks.push_back({"add_layer_norm_fwd", 4 * e, {2, 2}, fwd(NormKind::layer, 0.0)});
    ks.push_back({"add_layer_norm_fwd_dropout0.1", 4 * e, {2, 2}, fwd(NormKind::layer, 0.1)});
    ks.push_back({"add_rms_norm_fwd", 4 * e, {2, 2}, fwd(NormKind::rms, 0.0)});
    // DeepNorm: s = alpha * h + f (alpha = (2N)^(1/4) for N = 6 decoder layers), y = LayerNorm(s).
    ks.push_back({"deepnorm_layer_norm_fwd", 4 * e, {2, 2}, fwd(NormKind::layer, 0.0, 1.8612)});
    // LayerScale (gamma's values as the scale): s = h + f * layer[c], y = LayerNorm(s).
    ks.push_back({"add_layer_norm_fwd_layerscale", 4 * e, {2, 2}, [](Data<T>& w) {
                    add_norm_forward<T>(w.view(w.out1), w.view(w.out2), w.m(), w.r(), w.cview(w.a), w.cview(w.b),
                                        w.gamma.cspan(), w.beta.cspan(), AddNormOptions{},
                                        BranchScale<T>{w.gamma.cspan(), {}});
                  }});
  }
  if constexpr (K::add_norm_backward) {
    // Pre-norm backward: reads dy = a, ds = b, s = c; writes dh, df; dgamma (and dbeta) +=.
    auto bwd = [](NormKind kind, double p, bool post = false) {
      return [kind, p, post](Data<T>& w) {
        AddNormOptions o;
        o.kind = kind;
        o.dropout.p = p;
        o.dropout.seed = 42;
        const std::span<const stat_t<T>> mean = kind == NormKind::layer ? w.m() : std::span<stat_t<T>>{};
        add_norm_backward<T>(w.view(w.out1), w.view(w.out2), w.dgamma.span(),
                             kind == NormKind::layer ? w.dbeta.span() : std::span<T>{}, w.cview(w.a),
                             post ? View2D<const T>{} : w.cview(w.b), w.cview(w.c), mean, w.r(), w.gamma.cspan(), o);
      };
    };
    ks.push_back({"add_layer_norm_bwd", 5 * e, {3, 2}, bwd(NormKind::layer, 0.0)});
    ks.push_back({"add_layer_norm_bwd_dropout0.1", 5 * e, {3, 2}, bwd(NormKind::layer, 0.1)});
    ks.push_back({"add_rms_norm_bwd", 5 * e, {3, 2}, bwd(NormKind::rms, 0.0)});
    // Post-norm backward: no gradient arrives on the stream (ds absent); reads dy, s, writes dh, df.
    ks.push_back({"add_layer_norm_bwd_postnorm", 4 * e, {3, 2}, bwd(NormKind::layer, 0.0, true)});
    // The same with LayerScale (gamma's values): df scaled; with dlayer (into dbeta's buffer, so
    // without dbeta) it also reads f = b, and runs its second pass per row.
    auto bwd_scaled = [](bool dlayer) {
      return [dlayer](Data<T>& w) {
        add_norm_backward<T>(w.view(w.out1), w.view(w.out2), w.dgamma.span(), dlayer ? std::span<T>{} : w.dbeta.span(),
                             w.cview(w.a), {}, w.cview(w.c), w.m(), w.r(), w.gamma.cspan(), AddNormOptions{},
                             BranchScale<T>{w.gamma.cspan(), {}}, dlayer ? w.dbeta.span() : std::span<T>{},
                             dlayer ? w.cview(w.b) : View2D<const T>{});
      };
    };
    ks.push_back({"add_layer_norm_bwd_postnorm_layerscale", 4 * e, {3, 2}, bwd_scaled(false)});
    ks.push_back({"add_layer_norm_bwd_postnorm_dlayerscale", 5 * e, {3, 2}, bwd_scaled(true)});
  }
  if constexpr (K::rezero_forward) {
    // ReZero: s = h + a * Dropout(f) (h = a, f = b); reads h, f, writes s: the STREAM triad's bytes.
    auto fwd = [](double p) {
      return [p](Data<T>& w) {
        rezero_forward<T>(w.view(w.out1), w.cview(w.a), w.cview(w.b), 0.25, DropoutSpec{p, 42, 0});
      };
    };
    ks.push_back({"rezero_fwd", 3 * e, {2, 1}, fwd(0.0)});
    ks.push_back({"rezero_fwd_dropout0.1", 3 * e, {2, 1}, fwd(0.1)});
  }
  if constexpr (K::rezero_backward) {
    // dh = ds, df = a * Dropout'(ds), da += sum(ds * Dropout(f)) (ds = a, f = b); reads ds, f, writes dh, df.
    auto bwd = [](double p) {
      return [p](Data<T>& w) {
        double da = 0;
        rezero_backward<T>(w.view(w.out1), w.view(w.out2), da, w.cview(w.a), w.cview(w.b), 0.25, DropoutSpec{p, 42, 0});
        benchmark::DoNotOptimize(da);
      };
    };
    ks.push_back({"rezero_bwd", 4 * e, {2, 2}, bwd(0.0)});
    ks.push_back({"rezero_bwd_dropout0.1", 4 * e, {2, 2}, bwd(0.1)});
  }
  if constexpr (K::add_norm_forward_f32_stream) {
    // 16-bit data with an f32 residual stream: h = fa, s = fout (f32); f = a, y = out1 (T).
    ks.push_back(
        {"add_layer_norm_fwd_f32stream", 2 * f + 2 * e, {.in = 1, .out = 1, .f32_in = 1, .f32_out = 1}, [](Data<T>& w) {
           add_norm_forward<T, float>(w.fview(w.fout), w.view(w.out1), w.m(), w.r(), w.cfview(w.fa), w.cview(w.a),
                                      w.gamma.cspan(), w.beta.cspan(), AddNormOptions{});
         }});
  }
  if constexpr (K::add_norm_backward_f32_stream) {
    // dy = a (T), ds = fa, s = fb (f32); dh = fout (f32), df = out1 (T).
    ks.push_back(
        {"add_layer_norm_bwd_f32stream", 3 * f + 2 * e, {.in = 1, .out = 1, .f32_in = 2, .f32_out = 1}, [](Data<T>& w) {
           add_norm_backward<T, float>(w.fview(w.fout), w.view(w.out1), w.dgamma.span(), w.dbeta.span(), w.cview(w.a),
                                       w.cfview(w.fa), w.cfview(w.fb), w.m(), w.r(), w.gamma.cspan(), AddNormOptions{});
         }});
  }
  return ks;
}

std::vector<int> thread_counts() {
  const int most = std::max(1, omp_get_max_threads());
  std::vector<int> ts{1};
  if (most > 1) ts.push_back(most);
  return ts;
}

template <class T>
void register_type() {
  for (const Kernel<T>& k : kernels<T>()) {
    for (const Shape s : kShapes) {
      if (std::string_view(k.name).starts_with("batch_norm") && s.rows < 2) continue;  // no batch statistics
      for (const int t : thread_counts()) {
        const std::string name = std::string(k.name) + "/" + std::string(DType<T>::name) +
                                 "/rows:" + std::to_string(s.rows) + "/d:" + std::to_string(s.d) +
                                 "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [k, s, t, name](benchmark::State& state) {
                                       addnorm::set_num_threads(t);
                                       Data<T>& w = data_for<T>(name, s, k.needs);
                                       k.call(w);  // warm the caches and any thread pool
                                       for (auto _ : state) {
                                         k.call(w);
                                         benchmark::ClobberMemory();
                                       }
                                       const auto bytes = static_cast<int64_t>(k.bytes_per_elem) * s.rows * s.d;
                                       state.SetBytesProcessed(state.iterations() * bytes);
                                       state.counters["elems/s"] =
                                           benchmark::Counter(static_cast<double>(s.rows * s.d),
                                                              benchmark::Counter::kIsIterationInvariantRate);
                                     })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace addnorm::bench

int main(int argc, char** argv) {
  using namespace addnorm::bench;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("addnorm_build", ADDNORM_BENCH_BUILD_INFO);
  std::string missing;
  for_each_dtype([&]<class T>(T) {
    register_type<T>();
    if (!KernelSet<T>::layer_norm_forward)
      missing += std::string(missing.empty() ? "" : " ") + std::string(DType<T>::name);
    if (KernelSet<T>::layer_norm_forward && !KernelSet<T>::add_norm_forward)
      missing += std::string(missing.empty() ? "" : " ") + "add_norm/" + std::string(DType<T>::name);
  });
  benchmark::AddCustomContext("addnorm_not_instantiated", missing.empty() ? "none" : missing);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
