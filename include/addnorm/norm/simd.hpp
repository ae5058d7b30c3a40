// Which SIMD code the normalization kernels run. addnorm compiles its row kernels for several
// targets and picks the best one the CPU supports at first use; tests and benchmarks may pin one.
// The environment variable ADDNORM_SIMD (e.g. ADDNORM_SIMD=avx2) sets the starting choice.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace addnorm {

// Targets this CPU can run, best first: a subset of {"avx512bf16", "avx512", "avx2", "generic"}.
std::vector<std::string> supported_simd_targets();

// The target in use.
std::string simd_target();

// Uses `name` from now on (all threads). Throws Error("[set_simd_target] ...") when the name is
// unknown or this CPU cannot run it.
void set_simd_target(std::string_view name);

}  // namespace addnorm
