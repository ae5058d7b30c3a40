// Helpers for the normalization tests: strided, misaligned, guarded matrices; seeded random
// fills; dtype-keyed tolerances (|got - ref| <= atol + k * eps(T) * max(|ref|, scale)) with
// comparisons that print the failing elements; bitwise comparisons; central finite differences;
// a scoped thread count; checks of addnorm::Error messages.
//
// Every comparison returns a ::testing::AssertionResult, so a failure prints the first few bad
// elements, their indices, the value, the reference, the error and the allowed error. Tests wrap
// each case in SCOPED_TRACE(describe(...)) so that the case's parameters (op, dtype, shape,
// layout, seed) are printed next to every failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/simd.hpp"

namespace addnorm::testing {

// ---------------------------------------------------------------------------------------------
// Case descriptions

// "a b c" from any streamable parts, for SCOPED_TRACE.
template <class... Parts>
std::string describe(const Parts&... parts) {
  std::ostringstream os;
  os.precision(10);
  (os << ... << parts);
  return os.str();
}

template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  if constexpr (std::is_same_v<T, f16>) return "f16";
  return "?";
}

// The element type's machine epsilon (2^-23, 2^-52, 2^-7 for bf16, 2^-10 for f16; numeric_limits
// knows only float and double).
template <class T>
constexpr double eps_of() {
  if constexpr (std::is_same_v<T, bf16>) return 0x1p-7;
  if constexpr (std::is_same_v<T, f16>) return 0x1p-10;
  return static_cast<double>(std::numeric_limits<T>::epsilon());
}

// ---------------------------------------------------------------------------------------------
// Random numbers (std::mt19937_64: the same stream on every platform for a given seed).

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double normal(double mean = 0, double stddev = 1) { return std::normal_distribution<double>(mean, stddev)(gen_); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }

 private:
  std::mt19937_64 gen_;
};

// n values of N(mean, stddev), rounded to T.
template <class T>
std::vector<T> random_vector(int64_t n, Rng& rng, double mean = 0, double stddev = 1) {
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<T>(rng.normal(mean, stddev));
  return v;
}

// n values of N(mean, stddev), rounded to T, from a stream of their own (Rng(seed)).
template <class T>
std::vector<T> seeded_vector(size_t n, uint64_t seed, double mean = 0, double stddev = 1) {
  Rng rng(seed);
  return random_vector<T>(static_cast<int64_t>(n), rng, mean, stddev);
}

template <class T>
std::vector<double> to_double(std::span<const T> v) {
  return {v.begin(), v.end()};
}

// ---------------------------------------------------------------------------------------------
// n elements of T starting `shift` elements past a cache line: zeros, or a copy of `values`
// (test_alignment, test_backward_walk).
template <class T>
class Placed {
 public:
  Placed(int64_t n, int64_t shift) : buf_(static_cast<size_t>(n) + 64) {
    const auto addr = reinterpret_cast<uintptr_t>(buf_.data());
    data_ = buf_.data() + (64 - addr % 64) % 64 / sizeof(T) + static_cast<size_t>(shift);
    n_ = static_cast<size_t>(n);
  }
  Placed(const std::vector<T>& values, int64_t shift) : Placed(static_cast<int64_t>(values.size()), shift) {
    std::copy(values.begin(), values.end(), data_);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  std::span<const T> span() const { return {data_, n_}; }
  std::vector<T> values() const { return std::vector<T>(data_, data_ + n_); }

 private:
  std::vector<T> buf_;
  T* data_ = nullptr;
  size_t n_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Matrices with a layout: an optional row stride larger than cols, a base pointer moved by
// `offset` elements (an odd offset misaligns float and double data), and guard elements before
// and after. Everything outside the elements holds a NaN with a recognizable payload: a kernel
// that reads it produces NaN, and gaps_intact() finds any write outside the elements.

struct Layout {
  int64_t pad = 0;     // row stride = cols + pad
  int64_t offset = 0;  // elements between the guard and the first element
  const char* name = "packed";
  // Moves the first element further, up to the next 64-byte line (at construction: a copy of the
  // matrix need not start on a line).
  bool line = false;
};

// The layouts every kernel is swept over.
inline std::vector<Layout> all_layouts() {
  return {{0, 0, "packed"}, {3, 0, "stride+3"}, {0, 1, "offset+1"}, {5, 3, "stride+5,offset+3"}};
}

template <class T>
T sentinel() {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(uint32_t{0x7fc0dead});
  } else if constexpr (std::is_same_v<T, bf16>) {
    return std::bit_cast<bf16>(uint16_t{0x7fad});  // a quiet NaN with a payload
  } else if constexpr (std::is_same_v<T, f16>) {
    return std::bit_cast<f16>(uint16_t{0x7ead});
  } else {
    return std::bit_cast<double>(uint64_t{0x7ff80000deadbeefULL});
  }
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
class Matrix {
 public:
  static constexpr int64_t kGuard = 16;

  Matrix(int64_t rows, int64_t cols, Layout layout = {})
      : rows_(rows),
        cols_(cols),
        stride_(cols + layout.pad),
        first_(kGuard + layout.offset),
        layout_(layout),
        buf_(static_cast<size_t>(first_ + rows * (cols + layout.pad) + kGuard + (layout.line ? 64 : 0)),
             sentinel<T>()) {
    while (layout.line && reinterpret_cast<uintptr_t>(buf_.data() + first_) % 64 != 0) ++first_;
    fill(T{0});
  }

  [[nodiscard]] int64_t rows() const { return rows_; }
  [[nodiscard]] int64_t cols() const { return cols_; }
  [[nodiscard]] int64_t stride() const { return stride_; }
  [[nodiscard]] const Layout& layout() const { return layout_; }

  T* data() { return buf_.data() + first_; }
  [[nodiscard]] const T* data() const { return buf_.data() + first_; }
  View2D<T> view() { return View2D<T>(data(), rows_, cols_, stride_); }
  [[nodiscard]] View2D<const T> cview() const { return View2D<const T>(data(), rows_, cols_, stride_); }
  // The elements of a one-row matrix as a span (a vector with a misaligned base and guards).
  std::span<T> span() { return {data(), static_cast<size_t>(rows_ == 0 ? 0 : cols_)}; }
  [[nodiscard]] std::span<const T> cspan() const { return {data(), static_cast<size_t>(rows_ == 0 ? 0 : cols_)}; }

  T& operator()(int64_t r, int64_t c) { return data()[r * stride_ + c]; }
  const T& operator()(int64_t r, int64_t c) const { return data()[r * stride_ + c]; }

  void fill(T v) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) (*this)(r, c) = v;
  }
  void fill_normal(Rng& rng, double mean = 0, double stddev = 1) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) (*this)(r, c) = static_cast<T>(rng.normal(mean, stddev));
  }
  // Sets the elements from packed (rows, cols) doubles, rounding to T.
  void set(std::span<const double> packed) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) (*this)(r, c) = static_cast<T>(packed[static_cast<size_t>(r * cols_ + c)]);
  }
  // The elements, packed (rows, cols), as doubles.
  [[nodiscard]] std::vector<double> packed() const {
    std::vector<double> out(static_cast<size_t>(rows_ * cols_));
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) out[static_cast<size_t>(r * cols_ + c)] = static_cast<double>((*this)(r, c));
    return out;
  }
  // True when every storage slot outside the elements still holds the sentinel.
  [[nodiscard]] ::testing::AssertionResult gaps_intact(std::string_view what) const {
    const T s = sentinel<T>();
    for (int64_t i = 0; i < static_cast<int64_t>(buf_.size()); ++i) {
      const int64_t rel = i - first_;
      const bool element = rel >= 0 && rel < rows_ * stride_ && rel % stride_ < cols_;
      if (!element && !same_bits(buf_[static_cast<size_t>(i)], s))
        return ::testing::AssertionFailure()
               << what << ": storage slot " << rel << " relative to the first element "
               << "(outside the " << rows_ << " x " << cols_ << " view, stride " << stride_
               << ") was written: " << static_cast<double>(buf_[static_cast<size_t>(i)]);
    }
    return ::testing::AssertionSuccess();
  }

 private:
  int64_t rows_, cols_, stride_, first_;
  Layout layout_;
  std::vector<T> buf_;
};

// A vector of n elements with the given layout's offset and guards (a one-row matrix).
template <class T>
Matrix<T> make_vector(int64_t n, Layout layout = {}) {
  return Matrix<T>(1, n, Layout{0, layout.offset, layout.name});
}

// ---------------------------------------------------------------------------------------------
// Tolerances, keyed by dtype: |got - ref| <= atol + k * eps(T) * max(|ref|, scale), where scale
// (optional, per element) is the magnitude of the terms that produced the value, for results
// that come from cancellation (sums, x - mean, g - mean(g) - x_hat * c1).

struct Tol {
  double atol;
  double k;
  double eps;
  [[nodiscard]] double allowed(double ref, double scale = 0) const {
    return atol + k * eps * std::max(std::fabs(ref), scale);
  }
};

// Forward outputs (y, mean, rstd): a few roundings of O(1) values.
template <class T>
Tol forward_tol() {
  return {std::is_same_v<T, float> ? 1e-30 : 1e-300, 8, eps_of<T>()};
}

// Backward outputs (dx, dgamma, dbeta), measured against a scale that bounds the terms.
template <class T>
Tol backward_tol() {
  return {std::is_same_v<T, float> ? 1e-30 : 1e-300, 16, eps_of<T>()};
}

// Compares got with ref element by element (NaN in ref requires NaN in got; otherwise got must be
// finite and within tolerance). cols is used only to print (row, col) indices.
inline ::testing::AssertionResult all_close(std::string_view what, std::span<const double> got,
                                            std::span<const double> ref, Tol tol, int64_t cols,
                                            std::span<const double> scale = {}) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, reference has " << ref.size();
  std::ostringstream bad;
  bad.precision(9);
  int64_t failures = 0;
  double worst = 0;  // largest err / allowed
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = scale.empty() ? 0.0 : scale[i];
    const double allowed = tol.allowed(ref[i], s);
    bool ok;
    double err;
    if (std::isnan(ref[i])) {
      ok = std::isnan(got[i]);
      err = ok ? 0 : std::numeric_limits<double>::infinity();
    } else {
      err = std::fabs(got[i] - ref[i]);
      ok = std::isfinite(got[i]) && err <= allowed;
      if (!std::isfinite(got[i])) err = std::numeric_limits<double>::infinity();
    }
    worst = std::max(worst, err / allowed);
    if (!ok && failures++ < 6) {
      const int64_t c = cols > 0 ? static_cast<int64_t>(i) % cols : 0;
      const int64_t r = cols > 0 ? static_cast<int64_t>(i) / cols : 0;
      bad << "\n  [" << r << ", " << c << "] got " << got[i] << ", reference " << ref[i] << ", error " << err
          << ", allowed " << allowed;
    }
  }
  if (std::getenv("ADDNORM_TEST_VERBOSE") != nullptr)
    std::printf("    %.*s: worst error / allowed = %.3g\n", static_cast<int>(what.size()), what.data(), worst);
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << failures << " of " << got.size()
                                       << " values out of tolerance (atol " << tol.atol << ", k " << tol.k << ", eps "
                                       << tol.eps << "; worst error / allowed " << worst << ")" << bad.str();
}

// Largest |got - ref| (infinity when a finite reference meets a non-finite value).
inline double max_abs_error(std::span<const double> got, std::span<const double> ref) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]);
    worst = std::max(worst, std::isfinite(e) ? e : std::numeric_limits<double>::infinity());
  }
  return worst;
}

// Bitwise equality of two sequences of T.
template <class T>
::testing::AssertionResult bitwise_equal(std::string_view what, std::span<const T> a, std::span<const T> b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " and " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i]))
      return ::testing::AssertionFailure()
             << what << ": element " << i << " differs: " << std::hexfloat << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Central finite differences: d f / d v[i] ~ (f(v + h e_i) - f(v - h e_i)) / (2h), with
// h = rel_h * max(1, |v[i]|). f reads v; v is restored exactly after each element.
inline std::vector<double> central_differences(std::vector<double>& v, const std::function<double()>& f,
                                               double rel_h = 1e-6) {
  std::vector<double> grad(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double orig = v[i];
    const double h = rel_h * std::max(1.0, std::fabs(orig));
    v[i] = orig + h;
    const double fp = f();
    v[i] = orig - h;
    const double fm = f();
    v[i] = orig;
    grad[i] = (fp - fm) / (2 * h);
  }
  return grad;
}

// sum(a * w): the scalar loss whose gradient with respect to a is w.
inline double dot(std::span<const double> a, std::span<const double> w) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * w[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Threads and errors

// Sets addnorm's thread count for a scope and restores it after.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

// Pins addnorm's SIMD target (avx512bf16, avx512, avx2, generic) for a scope and restores it after.
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(const std::string& target) : saved_(simd_target()) { set_simd_target(target); }
  ~ScopedSimdTarget() { set_simd_target(saved_); }
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;

 private:
  std::string saved_;
};

// Runs f() once on every SIMD target this CPU supports, each in a SCOPED_TRACE naming it.
template <class F>
void for_each_simd_target(F&& f) {
  for (const std::string& target : supported_simd_targets()) {
    SCOPED_TRACE("simd target " + target);
    ScopedSimdTarget scoped(target);
    f();
  }
}

// Sets an environment variable for a scope (unset: nullptr) and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old, had_ = true;
    set(value);
  }
  ~ScopedEnv() { set(had_ ? saved_.c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) {
    if (value != nullptr)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }
  std::string name_, saved_;
  bool had_ = false;
};

// Runs f() as on a wide L1 and as on a narrow one (ADDNORM_WIDE_L1=1, 0: the wide rows' fours and the
// walk of their last pass; by default the machine's L1 chooses, see l1_is_wide in
// src/norm/row_blocks.hpp), each in a SCOPED_TRACE: both paths on any machine.
template <class F>
void with_wide_l1_on_and_off(F&& f) {
  for (const char* v : {"1", "0"}) {
    SCOPED_TRACE(std::string("ADDNORM_WIDE_L1=") + v);
    ScopedEnv env("ADDNORM_WIDE_L1", v);
    f();
  }
}

// A sweep's case of `elements` elements: up to 50000 on every SIMD target the CPU supports (as
// for_each_simd_target), larger ones once on the default target (time).
template <class F>
void for_each_simd_target_if_small(int64_t elements, F&& f) {
  if (elements > 50000) return f();
  for_each_simd_target(std::forward<F>(f));
}

// Success when f throws addnorm::Error whose message contains every one of `needles`.
template <class F>
::testing::AssertionResult throws_error(F&& f, std::initializer_list<std::string_view> needles) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (std::string_view n : needles)
      if (msg.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << n << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-addnorm exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// ---------------------------------------------------------------------------------------------
// Error scales: per element, a bound on the magnitude of the terms that produce each output, for
// Tol::allowed(ref, scale). Two effects make x_hat = (x - mean) * rstd inexact beyond its own
// rounding, and both are part of the scale of x_hat:
//   - the mean is known to about eps * std, so x_hat is known to about eps * std * rstd (absolute;
//     about eps when eps is small against the variance): the term std * rstd (LayerNorm,
//     BatchNorm; not RMSNorm, which has no mean);
//   - a mean rounded to a number (the saved statistic; the reference's own double mean) is off by
//     eps * |mean|, which is eps * |mean| * rstd in x_hat. The forward kernels do not round the
//     mean (they carry it as hi + lo), so there this is only the reference's error, eps(f64);
//     the backward kernels read the mean saved in stat_t<T>, so there it is eps(T).
// The reference sums its d (or rows) terms one after the other in double, so its statistics carry
// a relative error of about sqrt(n) * eps(f64); for f64 kernels that is part of the scale of every
// output that depends on them (for f32 kernels it is negligible).
// Parameters: gamma and beta as doubles, empty = ones / zeros (absent). mask: empty = all valid.

struct Scales {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

namespace detail {
inline double param(const std::vector<double>& p, int64_t i, double absent) {
  return p.empty() ? absent : p[static_cast<size_t>(i)];
}
}  // namespace detail

// LayerNorm (rms = false) or RMSNorm (rms = true) with element type T: statistics per row. f is
// the reference forward of x (packed doubles), dy the upstream gradient (packed; may be empty).
template <class T>
Scales row_norm_scales(const ref::Forward& f, std::span<const double> x, const std::vector<double>& gamma,
                       const std::vector<double>& beta, std::span<const double> dy, bool rms) {
  const int64_t n = f.rows, d = f.cols;
  const double ref_weight = eps_of<double>() / eps_of<T>();
  const double ref_sum = 1 + ref_weight * std::sqrt(static_cast<double>(d));  // the reference's reductions
  Scales s;
  s.y.resize(static_cast<size_t>(n * d));
  s.dx.assign(static_cast<size_t>(n * d), 0.0);
  s.mean.resize(static_cast<size_t>(n));
  s.rstd.resize(static_cast<size_t>(n));
  s.dgamma.assign(static_cast<size_t>(d), 0.0);
  s.dbeta.assign(static_cast<size_t>(d), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const double rs = f.rstd[static_cast<size_t>(r)];
    const double one = rms ? 0.0 : std::sqrt(f.var[static_cast<size_t>(r)]) * rs;  // std in x_hat units
    const double mo = rms ? 0.0 : std::fabs(f.mean[static_cast<size_t>(r)]) * rs;  // |mean| in x_hat units
    double xmax = 0, sum_g = 0, sum_xg = 0;
    for (int64_t c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(r * d + c);
      xmax = std::max(xmax, std::fabs(x[i]));
      const double g = dy.empty() ? 0.0 : std::fabs(dy[i] * detail::param(gamma, c, 1.0));
      sum_g += g;
      sum_xg += (std::fabs(f.x_hat[i]) + one + mo) * g;
    }
    const double mg = sum_g / static_cast<double>(d), mxg = sum_xg / static_cast<double>(d);
    s.mean[static_cast<size_t>(r)] = xmax * ref_sum;
    s.rstd[static_cast<size_t>(r)] = std::fabs(rs) * ref_sum;
    for (int64_t c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(r * d + c);
      const double xh_fwd = (std::fabs(f.x_hat[i]) + one) * ref_sum + ref_weight * mo;
      const double xh_bwd = std::fabs(f.x_hat[i]) + one + mo;
      s.y[i] = xh_fwd * std::fabs(detail::param(gamma, c, 1.0)) + std::fabs(detail::param(beta, c, 0.0));
      if (dy.empty()) continue;
      const double g = std::fabs(dy[i] * detail::param(gamma, c, 1.0));
      s.dx[i] = rs * (g + (rms ? 0.0 : mg) + xh_bwd * mxg) * ref_sum;
      s.dgamma[static_cast<size_t>(c)] += std::fabs(dy[i]) * xh_bwd * ref_sum;
      s.dbeta[static_cast<size_t>(c)] += std::fabs(dy[i]);
    }
  }
  return s;
}

// BatchNorm in training mode with element type T: statistics per column over the valid rows.
template <class T>
Scales batch_norm_scales(const ref::Forward& f, std::span<const double> x, std::span<const uint8_t> mask,
                         const std::vector<double>& gamma, const std::vector<double>& beta,
                         std::span<const double> dy) {
  const int64_t n = f.rows, d = f.cols;
  const double ref_weight = eps_of<double>() / eps_of<T>();
  auto valid = [&](int64_t r) { return mask.empty() || mask[static_cast<size_t>(r)] != 0; };
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += valid(r) ? 1 : 0;
  Scales s;
  s.y.assign(static_cast<size_t>(n * d), 0.0);
  s.dx.assign(static_cast<size_t>(n * d), 0.0);
  s.mean.assign(static_cast<size_t>(d), 0.0);
  s.rstd.resize(static_cast<size_t>(d));
  s.dgamma.assign(static_cast<size_t>(d), 0.0);
  s.dbeta.assign(static_cast<size_t>(d), 0.0);
  for (int64_t c = 0; c < d; ++c) {
    const double rs = f.rstd[static_cast<size_t>(c)];
    const double mo = std::fabs(f.mean[static_cast<size_t>(c)]) * rs;
    const double one = std::sqrt(f.var[static_cast<size_t>(c)]) * rs;  // std in x_hat units
    const double gm = detail::param(gamma, c, 1.0);
    double sum_g = 0, sum_xg = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const size_t i = static_cast<size_t>(r * d + c);
      s.mean[static_cast<size_t>(c)] = std::max(s.mean[static_cast<size_t>(c)], std::fabs(x[i]));
      const double g = dy.empty() ? 0.0 : std::fabs(dy[i] * gm);
      sum_g += g;
      sum_xg += (std::fabs(f.x_hat[i]) + one + mo) * g;
    }
    const double mg = sum_g / static_cast<double>(count), mxg = sum_xg / static_cast<double>(count);
    const double ref_sum = 1 + ref_weight * std::sqrt(static_cast<double>(count));
    s.mean[static_cast<size_t>(c)] *= ref_sum;
    s.rstd[static_cast<size_t>(c)] = std::fabs(rs) * ref_sum;
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const size_t i = static_cast<size_t>(r * d + c);
      const double xh_fwd = (std::fabs(f.x_hat[i]) + one) * ref_sum + ref_weight * mo;
      const double xh_bwd = std::fabs(f.x_hat[i]) + one + mo;
      s.y[i] = xh_fwd * std::fabs(gm) + std::fabs(detail::param(beta, c, 0.0));
      if (dy.empty()) continue;
      s.dx[i] = rs * (std::fabs(dy[i] * gm) + mg + xh_bwd * mxg) * ref_sum;
      s.dgamma[static_cast<size_t>(c)] += std::fabs(dy[i]) * xh_bwd * ref_sum;
      s.dbeta[static_cast<size_t>(c)] += std::fabs(dy[i]);
    }
  }
  return s;
}

}  // namespace addnorm::testing
