// addnorm_anatomy: where the time of f32 LayerNorm goes on wide rows (issue 4's 4096 x 4096), in one
// run. Beside the library's forward and backward it times stand-alone loops that move the same
// bytes in the same order (rows split among the threads as the library splits them, two passes over
// each row, the second from cache, streaming stores) and do a growing share of the same work, so
// that each step's cost reads as the drop from the line above it. Each round first measures the
// STREAM triad (streaming stores), then every loop once (every other round in reverse order). The
// summary gives medians over the rounds of GB/s and of the percentage of the round's triad, and the
// median of the library's GB/s over its plain LayerNorm loop's, round by round. The bytes counted
// are bench/compare's: the forward reads x and writes y, the backward reads x and dy and writes dx.
//
//   addnorm_anatomy [--rows 4096] [--d 4096] [--threads 2] [--rounds 5] [--min-time 0.1] [--reps 5]
//
// The two last loops of each list are LayerNorm itself (they are checked against the library's
// results before anything is timed, and the program exits with 1 if they disagree), written plainly:
// one row at a time, the next row prefetched into L1 during a row's second pass, the parameter
// gradients of the backward added into per-chunk partials (64 chunks of rows) during the sums pass.
// The loops use GCC vector extensions of 16 floats; with -march=native on an AVX-512 machine (the
// release preset) they compile to whole zmm registers.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "addnorm/core/parallel.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "bench_common.hpp"
#include "measure.hpp"

namespace addnorm::bench {
namespace {

constexpr float kEps = 1e-5f;
constexpr int64_t kW = 16;  // floats per vector
using V [[gnu::vector_size(64)]] = float;

V ld(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void st(float* p, V v) { std::memcpy(p, &v, sizeof v); }
float hsum(V v) {
  float s = 0;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}
#if defined(__AVX512F__)
constexpr const char* kIsa = "AVX-512 (zmm)";
#elif defined(__AVX__)
constexpr const char* kIsa = "AVX (two ymm)";
#else
constexpr const char* kIsa = "SSE (four xmm; configure with -DADDNORM_NATIVE=ON for this machine's vectors)";
#endif

// A streaming store of 64 bytes at p (64-byte aligned).
void nt(float* p, V v) {
#if defined(__AVX512F__)
  _mm512_stream_ps(p, reinterpret_cast<__m512>(v));
#elif defined(__AVX__)
  __m256 h[2];
  std::memcpy(h, &v, sizeof v);
  _mm256_stream_ps(p, h[0]);
  _mm256_stream_ps(p + 8, h[1]);
#else
  __m128 q[4];
  std::memcpy(q, &v, sizeof v);
  for (int i = 0; i < 4; ++i) _mm_stream_ps(p + 4 * i, q[i]);
#endif
}

struct Problem {
  int64_t rows, d;
  float *x, *dy, *y, *dx, *gamma, *beta, *mean, *rstd, *partials, *dgamma, *dbeta;
  int64_t chunks;  // of rows, for the backward's partials
  [[nodiscard]] float* row(float* a, int64_t r) const { return a + r * d; }
  [[nodiscard]] int64_t chunk_begin(int64_t k) const { return rows * k / chunks; }
};

// ---- forward: stage 0 one pass; 1 two passes; 2 + the statistics; 3 + gamma and beta (LayerNorm)
template <int kStage>
void forward_row(const Problem& p, int64_t r) {
  const float* x = p.row(p.x, r);
  float* y = p.row(p.y, r);
  const int64_t d = p.d;
  float hi = 0, s = 1.0001f, ls = 0.5f;
  if constexpr (kStage == 1) {
    V a0 = {}, a1 = {};
    for (int64_t i = 0; i < d; i += 2 * kW) {
      a0 += ld(x + i);
      a1 += ld(x + i + kW);
    }
    s = 1 + 1e-9f * hsum(a0 + a1);
  } else if constexpr (kStage >= 2) {  // shifted sums, the mean split as hi + lo (as the library)
    const float k = x[0];
    V a0 = {}, a1 = {}, b0 = {}, b1 = {};
    for (int64_t i = 0; i < d; i += 2 * kW) {
      const V u = ld(x + i) - k, w = ld(x + i + kW) - k;
      a0 += u;
      a1 += w;
      b0 += u * u;
      b1 += w * w;
    }
    const float cn = static_cast<float>(d), shift = hsum(a0 + a1) / cn, var = hsum(b0 + b1) / cn - shift * shift;
    hi = k + shift;
    const float back = hi - k, lo = (k - (hi - back)) + (shift - back);
    s = 1.0f / std::sqrt(std::max(var, 0.0f) + kEps);
    ls = -(lo * s);
    p.mean[r] = hi + lo;
    p.rstd[r] = s;
  }
  const float* next = r + 1 < p.rows ? x + d : nullptr;
  for (int64_t i = 0; i < d; i += kW) {
    if (kStage > 0 && next != nullptr) __builtin_prefetch(next + i, 0, 3);
    const V xv = ld(x + i);
    if constexpr (kStage <= 1)
      nt(y + i, xv * s + ls);
    else if constexpr (kStage == 2)
      nt(y + i, (xv - hi) * s + ls);
    else
      nt(y + i, ((xv - hi) * s + ls) * ld(p.gamma + i) + ld(p.beta + i));
  }
}

// Each thread fences its streaming stores at the end of its rows, as the library does.
template <int kStage>
void forward(const Problem& p, int threads) {
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) forward_row<kStage>(p, r);
    _mm_sfence();
  }
}

// ---- backward: stage 0 one pass; 1 two passes; 2 + LayerNorm's dx (no gamma); 3 + gamma;
// 4 + dgamma and dbeta (LayerNorm backward)
template <int kStage>
void backward_row(const Problem& p, int64_t r, float* pdg, float* pdb) {
  const float* x = p.row(p.x, r);
  const float* dy = p.row(p.dy, r);
  float* dx = p.row(p.dx, r);
  const int64_t d = p.d;
  const float m = p.mean[r], s = p.rstd[r];
  float k1 = 0, k2 = 0;
  if constexpr (kStage == 0) {
    for (int64_t i = 0; i < d; i += kW) nt(dx + i, ld(x + i) * ld(dy + i));
    return;
  } else if constexpr (kStage == 1) {
    V a = {};
    for (int64_t i = 0; i < d; i += kW) a += ld(x + i) * ld(dy + i);
    k1 = 1e-9f * hsum(a);
  } else {
    V a = {}, b = {};
    for (int64_t i = 0; i < d; i += kW) {
      const V dyv = ld(dy + i), xh = (ld(x + i) - m) * s;
      const V g = kStage >= 3 ? dyv * ld(p.gamma + i) : dyv;
      a += xh * g;
      b += g;
      if constexpr (kStage == 4) {
        st(pdg + i, ld(pdg + i) + dyv * xh);
        st(pdb + i, ld(pdb + i) + dyv);
      }
    }
    const float cn = static_cast<float>(d);
    k1 = hsum(a) / cn;
    k2 = hsum(b) / cn;
  }
  const float* next_x = r + 1 < p.rows ? x + d : nullptr;
  const float* next_dy = dy + d;
  for (int64_t i = 0; i < d; i += kW) {
    if (next_x != nullptr) {
      __builtin_prefetch(next_x + i, 0, 3);
      __builtin_prefetch(next_dy + i, 0, 3);
    }
    const V xv = ld(x + i), dyv = ld(dy + i);
    if constexpr (kStage == 1) {
      nt(dx + i, xv * dyv + k1);
    } else {
      const V g = kStage >= 3 ? dyv * ld(p.gamma + i) : dyv;
      nt(dx + i, s * (g - k2 - (xv - m) * s * k1));
    }
  }
}

template <int kStage>
void backward(const Problem& p, int threads) {
  const int64_t d = p.d;
  if constexpr (kStage == 4) std::fill(p.partials, p.partials + p.chunks * 2 * d, 0.0f);
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t k = 0; k < p.chunks; ++k) {
      float* pdg = p.partials + k * 2 * d;
      for (int64_t r = p.chunk_begin(k); r < p.chunk_begin(k + 1); ++r) backward_row<kStage>(p, r, pdg, pdg + d);
    }
    _mm_sfence();
  }
  if constexpr (kStage == 4) {  // the chunks' partials in chunk order, columns split among the threads
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < d; c += kW) {
      V g = {}, b = {};
      for (int64_t k = 0; k < p.chunks; ++k) {
        g += ld(p.partials + k * 2 * d + c);
        b += ld(p.partials + k * 2 * d + d + c);
      }
      st(p.dgamma + c, g);
      st(p.dbeta + c, b);
    }
  }
}

// max_rel_err (bench_common.hpp) over n elements at a against b.
double max_rel_diff(const float* a, const float* b, int64_t n) {
  const auto count = static_cast<size_t>(n);
  return max_rel_err(std::span<const float>(a, count), std::span<const float>(b, count));
}

struct Step {
  const char* group;  // "forward" or "backward"
  const char* what;
  std::function<void()> fn;
  double bytes;
};

template <int kStage>
std::function<void()> forward_step(const Problem& p, int threads) {
  return [&p, threads] { forward<kStage>(p, threads); };
}
template <int kStage>
std::function<void()> backward_step(const Problem& p, int threads) {
  return [&p, threads] { backward<kStage>(p, threads); };
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int64_t rows, int64_t d, int threads, int rounds, double min_time, int reps) {
  const auto n = static_cast<size_t>(rows * d);
  const int64_t chunks = rows >= 512 ? 64 : std::max<int64_t>(1, rows / 8);
  Buffer<float> x(n), dy(n), y(n), dx(n), y_lib(n), dx_lib(n), gamma(static_cast<size_t>(d)),
      beta(static_cast<size_t>(d)), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows)),
      partials(static_cast<size_t>(chunks * 2 * d)), dgamma(static_cast<size_t>(d)), dbeta(static_cast<size_t>(d)),
      dgamma_lib(static_cast<size_t>(d)), dbeta_lib(static_cast<size_t>(d));
  fill_uniform(x.span(), 1, -2.0f, 3.0f);
  fill_uniform(dy.span(), 2, -1.0f, 1.0f);
  fill_uniform(gamma.span(), 3, 0.5f, 1.5f);
  fill_uniform(beta.span(), 4, -0.5f, 0.5f);
  const Problem p{rows,        d,           x.data(),    dy.data(),       y.data(),      dx.data(),    gamma.data(),
                  beta.data(), mean.data(), rstd.data(), partials.data(), dgamma.data(), dbeta.data(), chunks};
  addnorm::set_num_threads(threads);
  omp_set_num_threads(threads);

  const View2D<const float> xv(x.data(), rows, d), dyv(dy.data(), rows, d);
  const auto lib_forward = [&] {
    layer_norm_forward<float>(View2D<float>(y_lib.data(), rows, d), mean.span(), rstd.span(), xv, gamma.cspan(),
                              beta.cspan(), kEps);
  };
  const auto lib_backward = [&] {
    std::fill(dgamma_lib.data(), dgamma_lib.data() + d, 0.0f);  // the library adds into dgamma, dbeta
    std::fill(dbeta_lib.data(), dbeta_lib.data() + d, 0.0f);
    layer_norm_backward<float>(View2D<float>(dx_lib.data(), rows, d), dgamma_lib.span(), dbeta_lib.span(), dyv, xv,
                               mean.cspan(), rstd.cspan(), gamma.cspan());
  };

  // The LayerNorm loops against the library (the backward on the library's saved statistics).
  std::vector<float> lib_mean(static_cast<size_t>(rows)), lib_rstd(static_cast<size_t>(rows));
  lib_forward();
  std::copy(mean.data(), mean.data() + rows, lib_mean.begin());
  std::copy(rstd.data(), rstd.data() + rows, lib_rstd.begin());
  forward<3>(p, threads);
  const double e_y = max_rel_diff(y.data(), y_lib.data(), rows * d);
  const double e_stats =
      std::max(max_rel_diff(mean.data(), lib_mean.data(), rows), max_rel_diff(rstd.data(), lib_rstd.data(), rows));
  std::copy(lib_mean.begin(), lib_mean.end(), mean.data());
  std::copy(lib_rstd.begin(), lib_rstd.end(), rstd.data());
  lib_backward();
  backward<4>(p, threads);
  const double e_dx = max_rel_diff(dx.data(), dx_lib.data(), rows * d);
  const double e_dp =
      std::max(max_rel_diff(dgamma.data(), dgamma_lib.data(), d), max_rel_diff(dbeta.data(), dbeta_lib.data(), d));
  std::printf(
      "check against the library (largest |a - b| / max(1, |b|)): y %.2g, mean/rstd %.2g, dx %.2g, "
      "dgamma/dbeta %.2g\n",
      e_y, e_stats, e_dx, e_dp);
  constexpr double kTol = 1e-4;
  if (!(e_y <= kTol && e_stats <= kTol && e_dx <= kTol && e_dp <= kTol)) {
    std::fprintf(stderr, "addnorm_anatomy: the LayerNorm loops disagree with the library (tolerance %g)\n", kTol);
    return 1;
  }

  const double fb = 2.0 * static_cast<double>(n) * sizeof(float);  // forward: x read, y written
  const double bb = 3.0 * static_cast<double>(n) * sizeof(float);  // backward: x, dy read, dx written
  const std::vector<Step> steps = {
      {"forward", "one pass: y = x * k + c", forward_step<0>(p, threads), fb},
      {"forward", "two passes: a row sum, then y from cache", forward_step<1>(p, threads), fb},
      {"forward", "+ mean and variance, y = (x - mean) * rstd", forward_step<2>(p, threads), fb},
      {"forward", "+ gamma and beta: LayerNorm forward", forward_step<3>(p, threads), fb},
      {"forward", "addnorm::layer_norm_forward", lib_forward, fb},
      {"backward", "one pass: dx = x * dy", backward_step<0>(p, threads), bb},
      {"backward", "two passes: a row sum, then dx from cache", backward_step<1>(p, threads), bb},
      {"backward", "+ LayerNorm's dx without gamma", backward_step<2>(p, threads), bb},
      {"backward", "+ gamma", backward_step<3>(p, threads), bb},
      {"backward", "+ dgamma, dbeta: LayerNorm backward", backward_step<4>(p, threads), bb},
      {"backward", "addnorm::layer_norm_backward", lib_backward, bb},
  };
  std::vector<std::vector<double>> gbps(steps.size()), pct(steps.size());  // per step, per round

  // The triad: three arrays of 64 MiB (well past the L3), best of `reps` passes.
  const size_t tn = size_t{8} << 20;
  Buffer<double> ta(tn), tb(tn), tc(tn);
  std::fill(tb.data(), tb.data() + tn, 1.0);
  std::fill(tc.data(), tc.data() + tn, 2.0);
  const double triad_bytes = 3.0 * static_cast<double>(tn) * sizeof(double);
  std::vector<double> triads;
  std::printf("build: %s; loops in vectors of %s\n", ADDNORM_BENCH_BUILD_INFO, kIsa);
  std::printf(
      "each round: the triad, then the GB/s of every step in the order of the summary below (measured in\n"
      "that order in odd rounds, in reverse in even ones)\n");
  for (int round = 0; round < rounds; ++round) {
    const Timing tt =
        measure([&] { triad_streaming(ta.data(), tb.data(), tc.data(), 3.0, static_cast<int64_t>(tn), threads); },
                min_time, reps);
    const double triad = triad_bytes / tt.best / 1e9;
    triads.push_back(triad);
    std::printf("round %d: triad %.1f GB/s |", round + 1, triad);
    std::vector<double> g(steps.size());
    for (size_t j = 0; j < steps.size(); ++j) {  // rounds 2, 4, ... in reverse: no step always follows one other
      const size_t i = round % 2 == 1 ? steps.size() - 1 - j : j;
      g[i] = steps[i].bytes / measure(steps[i].fn, min_time, reps).best / 1e9;
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      gbps[i].push_back(g[i]);
      pct[i].push_back(100.0 * g[i] / triad);
      std::printf(" %.0f", g[i]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf(
      "\nf32 LayerNorm %lld x %lld, %d thread(s), %d round(s); medians over the rounds (%% of each round's "
      "triad, median %.1f GB/s)\n",
      static_cast<long long>(rows), static_cast<long long>(d), threads, rounds, median(triads));
  const char* group = "";
  for (size_t i = 0; i < steps.size(); ++i) {
    if (std::strcmp(group, steps[i].group) != 0) {
      group = steps[i].group;
      std::printf("%-9s %-46s %7s %8s %15s\n", group, "", "GB/s", "% triad", "(range of %)");
    }
    const auto [lo, hi] = std::minmax_element(pct[i].begin(), pct[i].end());
    std::printf("          %-46s %7.1f %7.1f%% %7.1f-%.1f%%\n", steps[i].what, median(gbps[i]), median(pct[i]), *lo,
                *hi);
  }
  // The library against the plain loop that does its work (the step listed just before it), round
  // by round: the two are timed one right after the other, seconds apart, so the ratio does not
  // move with the machine's state as the percentages of the triad do.
  std::printf("\nthe library's GB/s over its plain LayerNorm loop's, per round:\n");
  for (size_t i = 1; i < steps.size(); ++i) {
    if (std::strncmp(steps[i].what, "addnorm::", 9) != 0) continue;
    std::vector<double> ratio(gbps[i].size());
    for (size_t r = 0; r < ratio.size(); ++r) ratio[r] = gbps[i][r] / gbps[i - 1][r];
    const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
    const auto ahead = std::count_if(ratio.begin(), ratio.end(), [](double q) { return q >= 1.0; });
    std::printf("          %-46s median %.2f (%.2f-%.2f), the library ahead in %lld of %zu rounds\n", steps[i].group,
                median(ratio), *lo, *hi, static_cast<long long>(ahead), ratio.size());
  }
  return 0;
}

}  // namespace
}  // namespace addnorm::bench

int main(int argc, char** argv) {
  CLI::App app{"addnorm_anatomy: where the time of f32 LayerNorm goes on wide rows (see the top of bench/anatomy.cpp)"};
  int64_t rows = 4096, d = 4096;
  int threads = 2, rounds = 5, reps = 5;
  double min_time = 0.1;
  app.add_option("--rows", rows, "rows")->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  app.add_option("--d", d, "elements per row, a multiple of 32")
      ->check(CLI::Range(int64_t{32}, int64_t{1} << 24))
      ->check(CLI::Validator([](std::string& s) { return std::stoll(s) % 32 == 0 ? "" : "not a multiple of 32"; },
                             "a multiple of 32", "multiple of 32"));
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 1024));
  app.add_option("--rounds", rounds, "rounds (each: the triad, then every loop once)")->check(CLI::Range(1, 1000));
  app.add_option("--min-time", min_time, "seconds per timed batch")->check(CLI::Range(1e-6, 1000.0));
  app.add_option("--reps", reps, "timed batches per measurement (the best is kept)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (rows * d > (int64_t{1} << 31)) {
    std::fprintf(stderr, "addnorm_anatomy: --rows x --d is over 2^31 elements\n");
    return 2;
  }
  return addnorm::bench::run(rows, d, threads, rounds, min_time, reps);
}
