// Number and array formatting for the CLI's human output, in the style of the seeds' NumPy
// prints: values rounded to a number of decimals, trailing zeros dropped (1.069, not 1.0690;
// 5, not 5.0), and no negative zero.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace addnorm::cli {

// v rounded to `decimals` decimals: "-0.202", "5", "0.999998", "nan", "-inf"; magnitudes of 1e16
// and more in shortest exponent form ("1e+20").
std::string fmt_num(double v, int decimals);

// "[a, b, c]" with fmt_num.
std::string fmt_vec(std::span<const double> v, int decimals);

// A rows x cols matrix (row-major) as "[[a, b],\n [c, d]]", one line per row.
std::string fmt_matrix(std::span<const double> v, int64_t rows, int64_t cols, int decimals);

}  // namespace addnorm::cli
