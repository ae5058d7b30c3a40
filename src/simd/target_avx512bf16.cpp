// Row kernels compiled for the avx512bf16 target: avx512 plus AVX512-BF16's vcvtneps2bf16 for bf16
// stores (flags set in src/CMakeLists.txt).
#define ADDNORM_TARGET_NS avx512bf16
#include "target.inc"
