// Row kernels compiled for the avx2 target (flags set in src/CMakeLists.txt).
#define ADDNORM_TARGET_NS avx2
#include "target.inc"
