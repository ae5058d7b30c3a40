// Shared by addnorm_bench and addnorm_compare: element types, page-backed buffers, input data and
// the byte counts that turn a time into GB/s.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string_view>
#include <utility>

#include "addnorm/core/dtype.hpp"
#include "addnorm_bench_kernels.hpp"

namespace addnorm::bench {

// Every element type the benchmarks know. A kernel is benchmarked for a type when the library
// defines it (KernelSet<T>, probed from the built library), so a dtype newly instantiated in src/
// is picked up by rebuilding; a new storage type is one line here.
template <class T>
struct DType;
template <>
struct DType<float> {
  static constexpr std::string_view name = "f32";
};
template <>
struct DType<double> {
  static constexpr std::string_view name = "f64";
};
template <>
struct DType<addnorm::bf16> {
  static constexpr std::string_view name = "bf16";
};
template <>
struct DType<addnorm::f16> {
  static constexpr std::string_view name = "f16";
};

// Calls fn(T{}) for each element type, in the order of the tables.
template <class Fn>
void for_each_dtype(Fn&& fn) {
  fn(float{});
  fn(double{});
  fn(addnorm::bf16{});
  fn(addnorm::f16{});
}

template <class T>
T from_float(float v) {
  return static_cast<T>(v);  // explicit constructors of bf16/f16 from float
}
template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));  // bf16/f16 convert through float
}
template <>
inline double to_double<double>(double v) {
  return v;
}

// n elements of T in their own pages: 2 MiB aligned with transparent huge pages requested (the
// machine's THP mode is madvise), so that touching a large buffer costs few page faults. The
// memory is touched (zeroed) at construction, never in a timed loop. Move-only.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : n_(n) {
    if (n == 0) return;
    bytes_ = round_up(n * sizeof(T), kHuge);
    void* p = mmap(nullptr, bytes_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    map_ = p;
    map_bytes_ = bytes_ + kHuge;
    auto aligned = round_up(reinterpret_cast<uintptr_t>(p), kHuge);
    data_ = reinterpret_cast<T*>(aligned);
    madvise(data_, bytes_, MADV_HUGEPAGE);
    std::memset(static_cast<void*>(data_), 0, bytes_);
  }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    swap(o);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (map_ != nullptr) munmap(map_, map_bytes_);
  }

  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] size_t size() const { return n_; }
  [[nodiscard]] std::span<T> span() const { return {data_, n_}; }
  [[nodiscard]] std::span<const T> cspan() const { return {data_, n_}; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20;
  static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
  void swap(Buffer& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(bytes_, o.bytes_);
    std::swap(map_, o.map_);
    std::swap(map_bytes_, o.map_bytes_);
    std::swap(data_, o.data_);
  }
  size_t n_ = 0, bytes_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  T* data_ = nullptr;
};

// The largest |got[i] - ref[i]| / max(1, |ref[i]|) over the elements (got and ref: vectors or spans
// of one size), infinite when any is NaN: bench/compare's max_err, and addnorm_anatomy's check.
template <class G, class R>
double max_rel_err(const G& got, const R& ref) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = static_cast<double>(ref[i]);
    const double err = std::abs(static_cast<double>(got[i]) - r) / std::max(1.0, std::abs(r));
    if (!(err <= e)) e = std::isnan(err) ? INFINITY : err;
  }
  return e;
}

// Deterministic pseudo-random values in [lo, hi) (xorshift64*; fast enough for 16M elements).
template <class T>
void fill_uniform(std::span<T> out, uint64_t seed, float lo, float hi) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  const float scale = (hi - lo) / 16777216.0f;
  for (auto& v : out) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const auto bits = static_cast<uint32_t>((s * 0x2545F4914F6CDD1Dull) >> 40);  // 24 bits
    v = from_float<T>(lo + scale * static_cast<float>(bits));
  }
}

// The operations of bench/compare and the bytes each moves per call (issue 4): forward reads x and
// writes y; backward reads x and dy and writes dx; the fused pre-norm forward reads h and f and
// writes h' and y. Parameters, statistics and gradients of gamma/beta are not counted.
enum class Op {
  layer_norm_fwd,
  layer_norm_bwd,
  rms_norm_fwd,
  rms_norm_bwd,
  add_layer_norm_fwd,
  batch_norm_fwd,
  add_layer_norm_bwd,
  rezero_fwd,
  rezero_bwd
};

inline constexpr Op kAllOps[] = {Op::layer_norm_fwd, Op::layer_norm_bwd,     Op::rms_norm_fwd,
                                 Op::rms_norm_bwd,   Op::add_layer_norm_fwd, Op::batch_norm_fwd};
// Measured only when asked for by name (--ops): issue 4's table has no such column, and no peer has
// the fused backward or ReZero (s = h + a * f: the STREAM triad's own bytes and arithmetic).
inline constexpr Op kExtraOps[] = {Op::add_layer_norm_bwd, Op::rezero_fwd, Op::rezero_bwd};

constexpr std::string_view op_name(Op op) {
  switch (op) {
    case Op::layer_norm_fwd:
      return "layer_norm_fwd";
    case Op::layer_norm_bwd:
      return "layer_norm_bwd";
    case Op::rms_norm_fwd:
      return "rms_norm_fwd";
    case Op::rms_norm_bwd:
      return "rms_norm_bwd";
    case Op::add_layer_norm_fwd:
      return "add_layer_norm_fwd";
    case Op::batch_norm_fwd:
      return "batch_norm_fwd";
    case Op::add_layer_norm_bwd:
      return "add_layer_norm_bwd";
    case Op::rezero_fwd:
      return "rezero_fwd";
    case Op::rezero_bwd:
      return "rezero_bwd";
  }
  return "?";
}

// Number of (rows, d) arrays an op reads plus writes.
constexpr int arrays_moved(Op op) {
  switch (op) {
    case Op::layer_norm_fwd:
    case Op::rms_norm_fwd:
    case Op::batch_norm_fwd:
      return 2;
    case Op::layer_norm_bwd:
    case Op::rms_norm_bwd:
    case Op::rezero_fwd:  // reads h and f, writes s
      return 3;
    case Op::add_layer_norm_fwd:
    case Op::rezero_bwd:  // reads ds and f, writes dh and df
      return 4;
    case Op::add_layer_norm_bwd:  // reads s, dy and ds, writes dh and df
      return 5;
  }
  return 0;
}

}  // namespace addnorm::bench
