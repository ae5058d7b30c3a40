// Chooses the row-kernel target: the best one the CPU supports, ADDNORM_SIMD, or set_simd_target().
#include <atomic>
#include <cstdlib>
#include <string>

#include "addnorm/core/error.hpp"
#include "addnorm/norm/simd.hpp"
#include "row_ops.hpp"

namespace addnorm {
namespace {

enum Target : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kBest = kAvx512Bf16 };
constexpr const char* kNames[] = {"generic", "avx2", "avx512", "avx512bf16"};

bool cpu_supports(Target t) {
  switch (t) {
    case kAvx512Bf16:
      return cpu_supports(kAvx512) && __builtin_cpu_supports("avx512bf16");
    case kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
    case kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    default:
      return true;
  }
}

int parse(std::string_view name) {
  for (int t = kGeneric; t <= kBest; ++t)
    if (name == kNames[t]) return t;
  return -1;
}

int initial_target() {
  if (const char* env = std::getenv("ADDNORM_SIMD"); env != nullptr && *env != '\0') {
    const int t = parse(env);
    require(t >= 0, "ADDNORM_SIMD", "unknown target '", env, "'; expected avx512bf16, avx512, avx2 or generic");
    require(cpu_supports(static_cast<Target>(t)), "ADDNORM_SIMD", "this CPU cannot run target '", env, "'");
    return t;
  }
  for (int t = kBest; t >= kGeneric; --t)
    if (cpu_supports(static_cast<Target>(t))) return t;
  return kGeneric;
}

std::atomic<int>& current() {
  static std::atomic<int> target{initial_target()};
  return target;
}

// Each target's table is built only where the CPU runs that target: make_row_ops is compiled with
// its target's instructions (the avx512 one fills the table with AVX-512 stores), so calling it on a
// CPU without them is an illegal instruction. The other entries stay the generic table; they are
// never chosen (initial_target and set_simd_target take only supported targets).
template <class T>
detail::RowOps<T> make_table(Target t) {
  if (!cpu_supports(t)) return detail::generic::make_row_ops<T>();
  switch (t) {
    case kAvx512Bf16:
      return detail::avx512bf16::make_row_ops<T>();
    case kAvx512:
      return detail::avx512::make_row_ops<T>();
    case kAvx2:
      return detail::avx2::make_row_ops<T>();
    default:
      return detail::generic::make_row_ops<T>();
  }
}

template <class T>
struct Tables {
  detail::RowOps<T> ops[kBest + 1] = {make_table<T>(kGeneric), make_table<T>(kAvx2), make_table<T>(kAvx512),
                                      make_table<T>(kAvx512Bf16)};
};

}  // namespace

std::vector<std::string> supported_simd_targets() {
  std::vector<std::string> out;
  for (int t = kBest; t >= kGeneric; --t)
    if (cpu_supports(static_cast<Target>(t))) out.emplace_back(kNames[t]);
  return out;
}

std::string simd_target() { return kNames[current().load(std::memory_order_relaxed)]; }

void set_simd_target(std::string_view name) {
  const int t = parse(name);
  require(t >= 0, "set_simd_target", "unknown target '", name, "'; expected avx512bf16, avx512, avx2 or generic");
  require(cpu_supports(static_cast<Target>(t)), "set_simd_target", "this CPU cannot run target '", name, "'");
  current().store(t, std::memory_order_relaxed);
}

namespace detail {
template <class T>
const RowOps<T>& row_ops() {
  static const Tables<T> tables;
  return tables.ops[current().load(std::memory_order_relaxed)];
}
template const RowOps<float>& row_ops<float>();
template const RowOps<double>& row_ops<double>();
template const RowOps<bf16>& row_ops<bf16>();
template const RowOps<f16>& row_ops<f16>();
}  // namespace detail

}  // namespace addnorm
