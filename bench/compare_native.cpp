// addnorm_compare: the native half of bench/compare. Measures, in one process,
//   - the machine's STREAM triad a[i] = b[i] + s * c[i] on large double arrays, with ordinary and
//     with streaming (non-temporal) stores, and a short one before and after each group of cases
//     (one dtype, shape and thread count: "triad_near" lines),
//   - addnorm's kernels, and
//   - oneDNN's layer_normalization (forward and backward) and batch_normalization (forward),
// and prints one JSON object per line on stdout (progress goes to stderr). bench/compare runs it,
// runs PyTorch and NumPy itself, and merges everything into one table.
//
//   addnorm_compare --info
//   addnorm_compare --impls triad,addnorm,onednn --ops layer_norm_fwd,rms_norm_bwd --dtypes f32,bf16
//                   --shapes 8192x768,1x512 --threads 1,2 [--min-time 0.05] [--reps 5] [--triad-mib 128]
//                   [--offset 16]  (every array 16 bytes past a cache line, as NumPy's large ones)
//   addnorm_compare --impls addnorm --ops add_layer_norm_bwd ...  (the fused backward, and rezero_fwd,
//                   rezero_bwd: only when named, as bench/sidebyside can; bench/compare's table has no such op)
//
// Method (the same as bench/compare's Python peers): every buffer is allocated and touched once
// before any timing and reused by every case; an impl is warmed with one call; then a batch size k
// is chosen so that k calls take >= min-time, and `reps` batches are timed. A result line carries
// the best and the median time per call over the batches. For row-wise ops each result also
// carries max_err, the largest |got - ref| / max(1, |ref|) over a few rows against addnorm's f64
// reference, so that a number is never reported for a wrong result unnoticed.
//
// Threads: for a case with t threads, addnorm::set_num_threads(t) and omp_set_num_threads(t) are
// called before oneDNN's primitive is created (oneDNN here runs on the same OpenMP runtime).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "addnorm/core/parallel.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "bench_common.hpp"
#include "measure.hpp"

namespace addnorm::bench {
namespace {

constexpr double kEps = 1e-5;
constexpr double kReZeroA = 0.25;  // ReZero's a (exact in every dtype)

// ---------------------------------------------------------------------------------------------
// Command line

struct Shape {
  int64_t rows = 0, d = 0;
};

struct Args {
  bool info = false;
  std::vector<std::string> impls{"triad", "addnorm", "onednn"};
  std::vector<Op> ops{std::begin(kAllOps), std::end(kAllOps)};
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<Shape> shapes{{8192, 768}, {4096, 4096}, {65536, 64}, {32, 1024}, {1, 512}};
  std::vector<int> threads{1, 2};
  double min_time = 0.05;   // seconds per timed batch
  int reps = 5;             // timed batches
  int64_t triad_mib = 128;  // per triad array
  int64_t offset = 0;       // bytes past a cache line at which every array starts
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "addnorm_compare: " << msg << "\n(see the comment at the top of bench/compare_native.cpp)\n";
  std::exit(2);
}

Op parse_op(const std::string& s) {
  for (Op op : kAllOps)
    if (op_name(op) == s) return op;
  for (Op op : kExtraOps)
    if (op_name(op) == s) return op;
  usage_error("unknown op '" + s + "'");
}

Args parse_args(int argc, char** argv) {
  Args a;
  CLI::App app{
      "addnorm_compare: the native half of bench/compare (see the comment at the top of "
      "bench/compare_native.cpp)"};
  std::vector<std::string> ops, shapes;
  app.add_flag("--info", a.info, "print the build and the machine, and stop");
  app.add_option("--impls", a.impls, "what to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"triad", "addnorm", "onednn"}));
  app.add_option("--ops", ops, "ops, e.g. layer_norm_fwd,rms_norm_bwd (default: all)")->delimiter(',');
  app.add_option("--dtypes", a.dtypes, "element types")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16"}));
  app.add_option("--shapes", shapes, "shapes ROWSxD, e.g. 8192x768,1x512")->delimiter(',');
  app.add_option("--threads", a.threads, "thread counts")->delimiter(',')->check(CLI::Range(1, 1024));
  app.add_option("--min-time", a.min_time, "seconds per timed batch")->check(CLI::Range(1e-6, 1e3));
  app.add_option("--reps", a.reps, "timed batches")->check(CLI::Range(1, 1000000));
  app.add_option("--triad-mib", a.triad_mib, "MiB per triad array")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--offset", a.offset,
                 "bytes past a cache line at which every array starts, a multiple of 8 below 64 (NumPy's large "
                 "arrays: 16)")
      ->check(CLI::Range(int64_t{0}, int64_t{56}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  if (a.offset % 8 != 0) usage_error("--offset " + std::to_string(a.offset) + " is not a multiple of 8");
  if (!ops.empty()) {
    a.ops.clear();
    for (const auto& s : ops) a.ops.push_back(parse_op(s));
  }
  if (!shapes.empty()) a.shapes.clear();
  for (const auto& s : shapes) {
    const auto parts = split(s, 'x');
    char* end0 = nullptr;
    char* end1 = nullptr;
    const long long rows = parts.size() == 2 ? std::strtoll(parts[0].c_str(), &end0, 10) : 0;
    const long long d = parts.size() == 2 ? std::strtoll(parts[1].c_str(), &end1, 10) : 0;
    if (parts.size() != 2 || *end0 != '\0' || *end1 != '\0' || rows < 1 || d < 1)
      usage_error("shape '" + s + "' is not ROWSxD with ROWS, D >= 1");
    a.shapes.push_back({rows, d});
  }
  return a;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// ---------------------------------------------------------------------------------------------
// Output: one JSON object per line

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

struct Case {
  Op op;
  std::string dtype;
  Shape shape;
  int threads;
};

std::string case_fields(const Case& c, const std::string& impl) {
  std::ostringstream os;
  os << "\"op\": " << json_str(std::string(op_name(c.op))) << ", \"dtype\": " << json_str(c.dtype)
     << ", \"rows\": " << c.shape.rows << ", \"d\": " << c.shape.d << ", \"threads\": " << c.threads
     << ", \"impl\": " << json_str(impl);
  return os.str();
}

void emit_result(const Case& c, const std::string& impl, const Timing& t, double bytes, std::optional<double> max_err,
                 const std::string& note) {
  std::cout << "{\"kind\": \"result\", " << case_fields(c, impl) << ", \"seconds\": " << json_num(t.best)
            << ", \"median_seconds\": " << json_num(t.median) << ", \"calls_per_batch\": " << t.calls
            << ", \"batches\": " << t.batches << ", \"bytes\": " << json_num(bytes)
            << ", \"gbps\": " << json_num(bytes / t.best / 1e9)
            << ", \"max_err\": " << (max_err ? json_num(*max_err) : "null") << ", \"note\": " << json_str(note) << "}"
            << std::endl;
  std::cerr << "  " << op_name(c.op) << " " << c.dtype << " " << c.shape.rows << "x" << c.shape.d << " t" << c.threads
            << " " << impl << ": " << bytes / t.best / 1e9 << " GB/s\n";
}

void emit_skip(const Case& c, const std::string& impl, const std::string& reason) {
  std::cout << "{\"kind\": \"skip\", " << case_fields(c, impl) << ", \"reason\": " << json_str(reason) << "}"
            << std::endl;
}

// ---------------------------------------------------------------------------------------------
// STREAM triad

// The triad twice: with ordinary stores (STREAM's C code as compiled here) and with streaming
// stores; bench/compare takes the faster as the machine's bandwidth.
void run_triad(const Args& args) {
  const auto n = static_cast<int64_t>(args.triad_mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(double)));
  Buffer<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  double* pa = a.data();
  const double* pb = b.data();
  const double* pc = c.data();
  const double s = 3.0;
  for (const int t : args.threads) {
#pragma omp parallel for schedule(static) num_threads(t)
    for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that will use the pages
      pa[i] = 0.0;
      b.data()[i] = 1.0;
      c.data()[i] = 2.0;
    }
    auto regular = [&] {
#pragma omp parallel for schedule(static) num_threads(t)
      for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    };
    auto streaming = [&] { triad_streaming(pa, pb, pc, s, n, t); };
    const bool have_streaming = triad_streaming(pa, pb, pc, s, 8, 1);
    for (const bool nt : {false, true}) {
      if (nt && !have_streaming) continue;
      // Each pass moves 3 * n * 8 bytes (384 MiB by default, well past the 32 MiB L3); best of
      // >= 10 passes, as STREAM reports.
      const Timing tm = measure(nt ? std::function<void()>(streaming) : std::function<void()>(regular), args.min_time,
                                std::max(args.reps, 10));
      const double bytes = 3.0 * static_cast<double>(n) * sizeof(double);
      std::cout << "{\"kind\": \"triad\", \"op\": \"triad\", \"dtype\": \"f64\", \"rows\": 1, \"d\": " << n
                << ", \"threads\": " << t << ", \"impl\": \"triad\", \"variant\": \"" << (nt ? "streaming" : "regular")
                << "\", \"seconds\": " << json_num(tm.best) << ", \"median_seconds\": " << json_num(tm.median)
                << ", \"calls_per_batch\": " << tm.calls << ", \"batches\": " << tm.batches
                << ", \"bytes\": " << json_num(bytes) << ", \"gbps\": " << json_num(bytes / tm.best / 1e9)
                << ", \"max_err\": null, \"note\": \"\"}" << std::endl;
      std::cerr << "  triad (" << (nt ? "streaming" : "regular") << " stores) t" << t << ": " << bytes / tm.best / 1e9
                << " GB/s\n";
    }
  }
}

// A short triad (streaming stores, three 64 MiB arrays, the best of 5 passes: about 20 ms) on t
// threads, run before and after each group of cases (one dtype, shape and thread count), so that
// bench/compare can tell which bandwidth state of a shared machine the group ran in. Prints a
// "triad_near" line for the group.
void run_triad_near(const Shape& sh, const std::string& dtype, int t, const char* when) {
  constexpr int64_t n = int64_t{8} << 20;  // doubles per array
  static Buffer<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  static bool touched = false;
  if (!touched) {
    for (int64_t i = 0; i < n; ++i) {
      a.data()[i] = 0.0;
      b.data()[i] = 1.0;
      c.data()[i] = 2.0;
    }
    touched = true;
  }
  double* pa = a.data();
  const double *pb = b.data(), *pc = c.data();
  auto pass = [&] {
    if (!triad_streaming(pa, pb, pc, 3.0, n, t)) {
#pragma omp parallel for schedule(static) num_threads(t)
      for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0 * pc[i];
    }
  };
  pass();
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double gbps = 3.0 * static_cast<double>(n) * sizeof(double) / best / 1e9;
  std::cout << "{\"kind\": \"triad_near\", \"dtype\": " << json_str(dtype) << ", \"rows\": " << sh.rows
            << ", \"d\": " << sh.d << ", \"threads\": " << t << ", \"when\": \"" << when
            << "\", \"gbps\": " << json_num(gbps) << "}" << std::endl;
}

// ---------------------------------------------------------------------------------------------
// Buffers shared by every case: allocated and touched once, at the largest size requested.

struct Arena {
  // (rows, d) arrays, in bytes: x (h), f, dy, y, s (h'), dx.
  Buffer<std::byte> x, f, dy, y, s, dx;
  // Vectors of max(rows, d): gamma, beta, dgamma, dbeta (as T), mean, rstd (stat_t), and f32
  // ones for oneDNN: scale, shift, diff_scale, diff_shift, mean, variance.
  Buffer<std::byte> gamma, beta, dgamma, dbeta, mean, rstd;
  Buffer<float> dn_scale, dn_shift, dn_dscale, dn_dshift, dn_mean, dn_var;

  size_t offset;  // bytes: where the (rows, d) arrays and the vectors of T and stat_t start

  // Every byte buffer has 64 bytes more than asked, for the offset.
  Arena(size_t big_bytes, size_t vec_elems, size_t off)
      : x(big_bytes + 64),
        f(big_bytes + 64),
        dy(big_bytes + 64),
        y(big_bytes + 64),
        s(big_bytes + 64),
        dx(big_bytes + 64),
        gamma(vec_elems * 8 + 64),
        beta(vec_elems * 8 + 64),
        dgamma(vec_elems * 8 + 64),
        dbeta(vec_elems * 8 + 64),
        mean(vec_elems * 8 + 64),
        rstd(vec_elems * 8 + 64),
        dn_scale(vec_elems),
        dn_shift(vec_elems),
        dn_dscale(vec_elems),
        dn_dshift(vec_elems),
        dn_mean(vec_elems),
        dn_var(vec_elems),
        offset(off) {}
};

// The arena buffer b as T, `offset` bytes in (Buffer's data starts on a 2 MiB boundary).
template <class T>
T* as(const Buffer<std::byte>& b, size_t offset) {
  return reinterpret_cast<T*>(b.data() + offset);
}

// Typed views of the arena for one case.
template <class T>
struct Bufs {
  using S = stat_t<T>;
  int64_t rows, d;
  T *x, *f, *dy, *y, *s, *dx, *gamma, *beta, *dgamma, *dbeta;
  S *mean, *rstd;

  Bufs(const Arena& a, Shape sh)
      : rows(sh.rows),
        d(sh.d),
        x(as<T>(a.x, a.offset)),
        f(as<T>(a.f, a.offset)),
        dy(as<T>(a.dy, a.offset)),
        y(as<T>(a.y, a.offset)),
        s(as<T>(a.s, a.offset)),
        dx(as<T>(a.dx, a.offset)),
        gamma(as<T>(a.gamma, a.offset)),
        beta(as<T>(a.beta, a.offset)),
        dgamma(as<T>(a.dgamma, a.offset)),
        dbeta(as<T>(a.dbeta, a.offset)),
        mean(as<S>(a.mean, a.offset)),
        rstd(as<S>(a.rstd, a.offset)) {}

  [[nodiscard]] size_t n() const { return static_cast<size_t>(rows * d); }
  [[nodiscard]] View2D<T> v(T* p) const { return {p, rows, d}; }
  [[nodiscard]] View2D<const T> cv(const T* p) const { return {p, rows, d}; }
  [[nodiscard]] std::span<const T> g() const { return {gamma, static_cast<size_t>(d)}; }
  [[nodiscard]] std::span<const T> b() const { return {beta, static_cast<size_t>(d)}; }
  [[nodiscard]] std::span<S> m(int64_t k) const { return {mean, static_cast<size_t>(k)}; }
  [[nodiscard]] std::span<S> r(int64_t k) const { return {rstd, static_cast<size_t>(k)}; }
};

template <class T>
void fill_inputs(const Arena& a, const Bufs<T>& b) {
  fill_uniform(std::span<T>(b.x, b.n()), 1, -2.0f, 3.0f);  // mean 0.5, not centered
  fill_uniform(std::span<T>(b.f, b.n()), 2, -1.0f, 1.0f);
  fill_uniform(std::span<T>(b.dy, b.n()), 3, -1.0f, 1.0f);
  const auto d = static_cast<size_t>(b.d);
  fill_uniform(std::span<T>(b.gamma, d), 4, 0.5f, 1.5f);
  fill_uniform(std::span<T>(b.beta, d), 5, -0.5f, 0.5f);
  for (size_t c = 0; c < d; ++c) {  // oneDNN's f32 parameters: the same values
    a.dn_scale.data()[c] = static_cast<float>(to_double(b.gamma[c]));
    a.dn_shift.data()[c] = static_cast<float>(to_double(b.beta[c]));
  }
}

// ---------------------------------------------------------------------------------------------
// Checks against addnorm's f64 reference on a few rows

template <class T>
std::vector<double> rows_to_double(const T* p, int64_t d, const std::vector<int64_t>& rows) {
  std::vector<double> out;
  out.reserve(rows.size() * static_cast<size_t>(d));
  for (int64_t r : rows)
    for (int64_t c = 0; c < d; ++c) out.push_back(to_double(p[r * d + c]));
  return out;
}

template <class T>
std::vector<int64_t> check_rows(const Bufs<T>& b) {
  std::vector<int64_t> rows{0};
  if (b.rows > 2) rows.push_back(b.rows / 2);
  if (b.rows > 1) rows.push_back(b.rows - 1);
  return rows;
}

// The reference output of `op` for the check rows; `out` is the array to compare against it
// (y for forwards, dx for backwards), `out2` the second one (s for the fused forward).
template <class T>
double check(Op op, const Bufs<T>& b, const T* out, const T* out2) {
  const auto rows = check_rows(b);
  const auto k = static_cast<int64_t>(rows.size());
  const int64_t d = b.d;
  const auto x = rows_to_double(b.x, d, rows);
  const auto dy = rows_to_double(b.dy, d, rows);
  std::vector<double> gamma(static_cast<size_t>(d)), beta(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    gamma[static_cast<size_t>(c)] = to_double(b.gamma[c]);
    beta[static_cast<size_t>(c)] = to_double(b.beta[c]);
  }
  const View2D<const double> xv(x.data(), k, d), dyv(dy.data(), k, d);
  const std::span<const double> g(gamma), be(beta);
  const auto got = rows_to_double(out, d, rows);
  switch (op) {
    case Op::layer_norm_fwd:
      return max_rel_err(got, ref::layer_norm_forward<double>(xv, g, be, kEps).y);
    case Op::layer_norm_bwd:
      return max_rel_err(got, ref::layer_norm_backward<double>(dyv, xv, g, kEps).dx);
    case Op::rms_norm_fwd:
      return max_rel_err(got, ref::rms_norm_forward<double>(xv, g, kEps).y);
    case Op::rms_norm_bwd:
      return max_rel_err(got, ref::rms_norm_backward<double>(dyv, xv, g, kEps).dx);
    case Op::add_layer_norm_fwd: {
      const auto f = rows_to_double(b.f, d, rows);
      std::vector<double> s(x.size());
      for (size_t i = 0; i < s.size(); ++i) s[i] = x[i] + f[i];
      const double es = max_rel_err(rows_to_double(out2, d, rows), s);
      const View2D<const double> sv(s.data(), k, d);
      return std::max(es, max_rel_err(got, ref::layer_norm_forward<double>(sv, g, be, kEps).y));
    }
    case Op::add_layer_norm_bwd: {  // dh = LayerNorm's dx at the kernel's own s, + ds (f); df = dh
      const auto s = rows_to_double(b.s, d, rows), ds = rows_to_double(b.f, d, rows);
      auto dh = ref::layer_norm_backward<double>(dyv, View2D<const double>(s.data(), k, d), g, kEps).dx;
      for (size_t i = 0; i < dh.size(); ++i) dh[i] += ds[i];
      return std::max(max_rel_err(got, dh), max_rel_err(rows_to_double(out2, d, rows), dh));
    }
    case Op::rezero_fwd: {  // s = h + a * f
      const auto f = rows_to_double(b.f, d, rows);
      std::vector<double> s(x.size());
      for (size_t i = 0; i < s.size(); ++i) s[i] = x[i] + kReZeroA * f[i];
      return max_rel_err(got, s);
    }
    case Op::rezero_bwd: {  // dh = ds (dy), df = a * ds
      std::vector<double> df(dy.size());
      for (size_t i = 0; i < df.size(); ++i) df[i] = kReZeroA * dy[i];
      return std::max(max_rel_err(got, dy), max_rel_err(rows_to_double(out2, d, rows), df));
    }
    case Op::batch_norm_fwd:
      return NAN;  // column statistics need every row: not checked
  }
  return NAN;
}

// ---------------------------------------------------------------------------------------------
// addnorm

template <class T>
void run_addnorm(const Case& c, const Args& args, const Bufs<T>& b) {
  using K = KernelSet<T>;
  const double bytes = static_cast<double>(arrays_moved(c.op)) * static_cast<double>(b.n()) * sizeof(T);
  std::function<void()> fn;
  const T* out = b.y;
  const T* out2 = nullptr;
  const auto rows = b.rows, d = b.d;
  switch (c.op) {
    case Op::layer_norm_fwd:
      if constexpr (K::layer_norm_forward)
        fn = [&b, rows] { layer_norm_forward<T>(b.v(b.y), b.m(rows), b.r(rows), b.cv(b.x), b.g(), b.b(), kEps); };
      break;
    case Op::layer_norm_bwd:
      if constexpr (K::layer_norm_forward && K::layer_norm_backward) {
        layer_norm_forward<T>(b.v(b.y), b.m(rows), b.r(rows), b.cv(b.x), b.g(), b.b(), kEps);  // saved stats
        fn = [&b, rows, d] {
          layer_norm_backward<T>(b.v(b.dx), {b.dgamma, static_cast<size_t>(d)}, {b.dbeta, static_cast<size_t>(d)},
                                 b.cv(b.dy), b.cv(b.x), b.m(rows), b.r(rows), b.g());
        };
        out = b.dx;
      }
      break;
    case Op::rms_norm_fwd:
      if constexpr (K::rms_norm_forward)
        fn = [&b, rows] { rms_norm_forward<T>(b.v(b.y), b.r(rows), b.cv(b.x), b.g(), kEps); };
      break;
    case Op::rms_norm_bwd:
      if constexpr (K::rms_norm_forward && K::rms_norm_backward) {
        rms_norm_forward<T>(b.v(b.y), b.r(rows), b.cv(b.x), b.g(), kEps);
        fn = [&b, rows, d] {
          rms_norm_backward<T>(b.v(b.dx), {b.dgamma, static_cast<size_t>(d)}, b.cv(b.dy), b.cv(b.x), b.r(rows), b.g());
        };
        out = b.dx;
      }
      break;
    case Op::add_layer_norm_fwd:
      if constexpr (K::add_norm_forward) {
        // Pre-norm: h' = h + f (p = 0), y = LayerNorm(h'). h is x, h' goes to s.
        fn = [&b, rows] {
          add_norm_forward<T>(b.v(b.s), b.v(b.y), b.m(rows), b.r(rows), b.cv(b.x), b.cv(b.f), b.g(), b.b(),
                              AddNormOptions{});
        };
        out2 = b.s;
      }
      break;
    case Op::add_layer_norm_bwd:
      if constexpr (K::add_norm_forward && K::add_norm_backward) {
        // Pre-norm backward (p = 0) from the forward's s and statistics: dh to dx, df to y, and
        // the gradient on the residual stream read from f.
        add_norm_forward<T>(b.v(b.s), b.v(b.y), b.m(rows), b.r(rows), b.cv(b.x), b.cv(b.f), b.g(), b.b(),
                            AddNormOptions{});
        fn = [&b, rows, d] {
          add_norm_backward<T>(b.v(b.dx), b.v(b.y), {b.dgamma, static_cast<size_t>(d)},
                               {b.dbeta, static_cast<size_t>(d)}, b.cv(b.dy), b.cv(b.f), b.cv(b.s), b.m(rows),
                               b.r(rows), b.g(), AddNormOptions{});
        };
        out = b.dx;
        out2 = b.y;
      }
      break;
    case Op::rezero_fwd:
      if constexpr (K::rezero_forward)
        fn = [&b] { rezero_forward<T>(b.v(b.y), b.cv(b.x), b.cv(b.f), kReZeroA, DropoutSpec{}); };
      break;
    case Op::rezero_bwd:
      if constexpr (K::rezero_backward) {
        // ds from dy; dh to dx, df to y.
        auto da = std::make_shared<double>(0.0);
        fn = [&b, da] { rezero_backward<T>(b.v(b.dx), b.v(b.y), *da, b.cv(b.dy), b.cv(b.f), kReZeroA, DropoutSpec{}); };
        out = b.dx;
        out2 = b.y;
      }
      break;
    case Op::batch_norm_fwd:
      if constexpr (K::batch_norm_forward) {
        // Training mode (batch statistics) with running statistics, as F.batch_norm(training=True).
        auto run = std::make_shared<std::vector<stat_t<T>>>(static_cast<size_t>(2 * d));
        std::fill(run->begin() + d, run->end(), stat_t<T>(1));
        fn = [&b, d, run] {
          const std::span<stat_t<T>> rs(*run);
          batch_norm_forward<T>(b.v(b.y), b.m(d), b.r(d), rs.first(static_cast<size_t>(d)),
                                rs.last(static_cast<size_t>(d)), b.cv(b.x), {}, b.g(), b.b(), BatchNormOptions{});
        };
      }
      break;
  }
  if (!fn) {
    emit_skip(c, "addnorm", "not instantiated in the library for this dtype (see addnorm_compare --info)");
    return;
  }
  const Timing t = measure(fn, args.min_time, args.reps);
  const double err = check<T>(c.op, b, out, out2);
  emit_result(c, "addnorm", t, bytes, std::isnan(err) ? std::nullopt : std::optional<double>(err), "");
}

// ---------------------------------------------------------------------------------------------
// oneDNN

template <class T>
constexpr dnnl::memory::data_type dnnl_type() {
  if constexpr (std::is_same_v<T, float>) return dnnl::memory::data_type::f32;
  if constexpr (std::is_same_v<T, addnorm::bf16>) return dnnl::memory::data_type::bf16;
  if constexpr (std::is_same_v<T, addnorm::f16>) return dnnl::memory::data_type::f16;
  return dnnl::memory::data_type::undef;
}

// The arguments of a normalization primitive's forward (layer or batch), shared with the closure
// that runs it.
std::shared_ptr<std::unordered_map<int, dnnl::memory>> forward_args(const dnnl::memory& src, const dnnl::memory& dst,
                                                                    const dnnl::memory& mean, const dnnl::memory& var,
                                                                    const dnnl::memory& scale,
                                                                    const dnnl::memory& shift) {
  return std::make_shared<std::unordered_map<int, dnnl::memory>>(
      std::unordered_map<int, dnnl::memory>{{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_DST, dst},
                                            {DNNL_ARG_MEAN, mean},
                                            {DNNL_ARG_VARIANCE, var},
                                            {DNNL_ARG_SCALE, scale},
                                            {DNNL_ARG_SHIFT, shift}});
}

template <class T>
void run_onednn(const Case& c, const Args& args, const Arena& a, const Bufs<T>& b) {
  using dnnl::memory;
  using tag = memory::format_tag;
  constexpr auto dt = dnnl_type<T>();
  if (dt == memory::data_type::undef) {
    emit_skip(c, "onednn", "dtype not supported by oneDNN");
    return;
  }
  if (c.op != Op::layer_norm_fwd && c.op != Op::layer_norm_bwd && c.op != Op::batch_norm_fwd) {
    emit_skip(c, "onednn", "no such primitive in oneDNN 2.6");
    return;
  }
  const double bytes = static_cast<double>(arrays_moved(c.op)) * static_cast<double>(b.n()) * sizeof(T);
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::dims data_dims{b.rows, b.d};
    const memory::desc data_md(data_dims, dt, tag::ab);
    const auto f32 = memory::data_type::f32;
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    auto mem = [&](const memory::desc& md, void* p) { return memory(md, eng, p); };
    const memory::desc vec_d({b.d}, f32, tag::a);
    const memory::desc vec_r({b.rows}, f32, tag::a);
    const memory src = mem(data_md, b.x), dst = mem(data_md, b.y), ddst = mem(data_md, b.dy), dsrc = mem(data_md, b.dx);
    const memory scale = mem(vec_d, a.dn_scale.data()), shift = mem(vec_d, a.dn_shift.data());
    const memory dscale = mem(vec_d, a.dn_dscale.data()), dshift = mem(vec_d, a.dn_dshift.data());

    std::function<void()> fn;
    std::string impl_info;
    const T* out = b.y;
    if (c.op == Op::batch_norm_fwd) {
      const memory mean = mem(vec_d, a.dn_mean.data()), var = mem(vec_d, a.dn_var.data());
      // (rows, d) row-major is (N, C, 1, 1) channels-last (nhwc): oneDNN's JIT batch norm takes
      // that layout, while a 2-D (N, C) tensor gets its slow plain-layout kernel.
      const memory::desc nhwc_md({b.rows, b.d, 1, 1}, dt, tag::nhwc);
      const memory src4 = mem(nhwc_md, b.x), dst4 = mem(nhwc_md, b.y);
      const dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_training, nhwc_md,
                                                         static_cast<float>(kEps), flags);
      const dnnl::batch_normalization_forward::primitive_desc pd(desc, eng);
      impl_info = pd.impl_info_str();
      auto prim = std::make_shared<dnnl::batch_normalization_forward>(pd);
      auto margs = forward_args(src4, dst4, mean, var, scale, shift);
      fn = [prim, margs, strm]() mutable {
        prim->execute(strm, *margs);
        strm.wait();
      };
    } else {
      const memory mean = mem(vec_r, a.dn_mean.data()), var = mem(vec_r, a.dn_var.data());
      // Forward training: writes y and the statistics (as addnorm's forward writes mean and rstd).
      const dnnl::layer_normalization_forward::desc fdesc(dnnl::prop_kind::forward_training, data_md,
                                                          static_cast<float>(kEps), flags);
      const dnnl::layer_normalization_forward::primitive_desc fpd(fdesc, eng);
      auto fwd = std::make_shared<dnnl::layer_normalization_forward>(fpd);
      auto fargs = forward_args(src, dst, mean, var, scale, shift);
      if (c.op == Op::layer_norm_fwd) {
        impl_info = fpd.impl_info_str();
        fn = [fwd, fargs, strm]() mutable {
          fwd->execute(strm, *fargs);
          strm.wait();
        };
      } else {
        fwd->execute(strm, *fargs);  // the statistics the backward reads
        strm.wait();
        // prop_kind::backward: dx, dgamma (diff_scale) and dbeta (diff_shift), as addnorm's.
        const dnnl::layer_normalization_backward::desc bdesc(dnnl::prop_kind::backward, data_md, data_md,
                                                             static_cast<float>(kEps), flags);
        const dnnl::layer_normalization_backward::primitive_desc bpd(bdesc, eng, fpd);
        impl_info = bpd.impl_info_str();
        auto bwd = std::make_shared<dnnl::layer_normalization_backward>(bpd);
        auto bargs = std::make_shared<std::unordered_map<int, memory>>(
            std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_MEAN, mean},
                                            {DNNL_ARG_VARIANCE, var},
                                            {DNNL_ARG_DIFF_DST, ddst},
                                            {DNNL_ARG_SCALE, scale},
                                            {DNNL_ARG_SHIFT, shift},
                                            {DNNL_ARG_DIFF_SRC, dsrc},
                                            {DNNL_ARG_DIFF_SCALE, dscale},
                                            {DNNL_ARG_DIFF_SHIFT, dshift}});
        fn = [bwd, bargs, strm]() mutable {
          bwd->execute(strm, *bargs);
          strm.wait();
        };
        out = b.dx;
      }
    }
    const Timing t = measure(fn, args.min_time, args.reps);
    const double err = check<T>(c.op, b, out, nullptr);
    emit_result(c, "onednn", t, bytes, std::isnan(err) ? std::nullopt : std::optional<double>(err), impl_info);
  } catch (const std::exception& e) {
    emit_skip(c, "onednn", std::string("oneDNN: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------

template <class T>
void run_dtype(const Args& args, const Arena& arena, const std::string& dtype) {
  for (const Shape sh : args.shapes) {
    const Bufs<T> b(arena, sh);
    fill_inputs<T>(arena, b);
    for (const int t : args.threads) {
      addnorm::set_num_threads(t);
      omp_set_num_threads(t);
      const bool near = has(args.impls, "triad");
      if (near) run_triad_near(sh, dtype, t, "before");
      for (const Op op : args.ops) {
        const Case c{op, dtype, sh, t};
        if (op == Op::batch_norm_fwd && sh.rows < 2) {
          for (const char* impl : {"addnorm", "onednn"})
            if (has(args.impls, impl)) emit_skip(c, impl, "batch statistics need >= 2 rows");
          continue;
        }
        // Both impls of a case back to back, on the same buffers.
        if (has(args.impls, "addnorm")) run_addnorm<T>(c, args, b);
        if (has(args.impls, "onednn")) run_onednn<T>(c, args, arena, b);
      }
      if (near) run_triad_near(sh, dtype, t, "after");
    }
  }
}

// oneDNN's instruction set in use (it picks its own, as addnorm does; DNNL_MAX_CPU_ISA caps it).
std::string onednn_isa() {
  switch (static_cast<int>(dnnl::get_effective_cpu_isa())) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa " + std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa()));
  }
}

void print_info() {
  const auto* v = dnnl::version();
  std::cout << "{\"kind\": \"info\", \"build\": " << json_str(ADDNORM_BENCH_BUILD_INFO)
            << ", \"simd\": " << json_str(addnorm::simd_target()) << ", \"onednn_isa\": " << json_str(onednn_isa())
            << ", \"onednn\": \"" << v->major << "." << v->minor << "." << v->patch
            << "\", \"omp_max_threads\": " << omp_get_max_threads()
            << ", \"kernels_probed\": " << (kKernelsProbed ? "true" : "false") << ", \"kernels\": {";
  bool first = true;
  for_each_dtype([&]<class T>(T) {
    using K = KernelSet<T>;
    const std::pair<const char*, bool> ks[] = {
        {"layer_norm_forward", K::layer_norm_forward}, {"layer_norm_backward", K::layer_norm_backward},
        {"rms_norm_forward", K::rms_norm_forward},     {"rms_norm_backward", K::rms_norm_backward},
        {"batch_norm_forward", K::batch_norm_forward}, {"batch_norm_backward", K::batch_norm_backward},
        {"add_norm_forward", K::add_norm_forward},     {"add_norm_backward", K::add_norm_backward}};
    std::cout << (first ? "" : ", ") << json_str(std::string(DType<T>::name)) << ": [";
    first = false;
    bool first_k = true;
    for (const auto& [name, have] : ks) {
      if (!have) continue;
      std::cout << (first_k ? "" : ", ") << json_str(name);
      first_k = false;
    }
    std::cout << "]";
  });
  std::cout << "}}" << std::endl;
}

}  // namespace
}  // namespace addnorm::bench

int main(int argc, char** argv) {
  using namespace addnorm::bench;
  const Args args = parse_args(argc, argv);
  print_info();
  if (args.info) return 0;
  if (has(args.impls, "triad")) run_triad(args);
  if (!has(args.impls, "addnorm") && !has(args.impls, "onednn")) return 0;

  size_t elem = 2;
  for (const auto& dtype : args.dtypes) elem = std::max<size_t>(elem, dtype == "f64" ? 8 : dtype == "f32" ? 4 : 2);
  size_t big = 0, vec = 1;
  for (const Shape s : args.shapes) {
    big = std::max(big, static_cast<size_t>(s.rows * s.d) * elem);
    vec = std::max(vec, static_cast<size_t>(std::max(s.rows, s.d)));
  }
  const Arena arena(big, vec, static_cast<size_t>(args.offset));
  for (const auto& dtype : args.dtypes) {
    if (dtype == "f32") {
      run_dtype<float>(args, arena, dtype);
    } else if (dtype == "f64") {
      run_dtype<double>(args, arena, dtype);
    } else if (dtype == "bf16") {
      run_dtype<addnorm::bf16>(args, arena, dtype);
    } else if (dtype == "f16") {
      run_dtype<addnorm::f16>(args, arena, dtype);
    } else {
      usage_error("unknown dtype '" + dtype + "'");
    }
  }
  return 0;
}
