// Row kernels compiled for the avx512 target (flags set in src/CMakeLists.txt).
#define ADDNORM_TARGET_NS avx512
#include "target.inc"
