// Row kernels compiled for the generic target (flags set in src/CMakeLists.txt).
#define ADDNORM_TARGET_NS generic
#include "target.inc"
