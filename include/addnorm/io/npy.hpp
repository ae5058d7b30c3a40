// NumPy .npy files (format versions 1.0, 2.0 and 3.0; little-endian; C order).
//
// Reading accepts the dtypes <f4, <f8, <i4 and <i8 and converts the values to double (exact for
// f4, f8, i4; i8 values beyond 2^53 in magnitude are an error). A header is at most
// kMaxNpyHeader bytes (NumPy's own limit); Fortran order is accepted only where it equals C order
// (0-D and 1-D arrays). Writing stores any of the four dtypes (f4 rounds to nearest, integers must
// be whole numbers in range) with a version 1.0 header padded to 64 bytes, as NumPy does. Errors
// throw addnorm::Error with the function, the file name and the problem, e.g.
// "[read_npy] x.npy: bad magic string".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace addnorm::io {

enum class DType { f32, f64, i32, i64 };

// The NumPy descr of a dtype: "<f4", "<f8", "<i4", "<i8".
std::string_view npy_descr(DType dtype);

// The size in bytes of one element.
size_t dtype_size(DType dtype);

// NumPy's default limit on the header length (numpy.lib.format._MAX_HEADER_SIZE).
inline constexpr size_t kMaxNpyHeader = 10000;

struct Array {
  DType dtype = DType::f64;    // the dtype in the file
  std::vector<int64_t> shape;  // C order; {} for a scalar
  std::vector<double> values;  // product(shape) values, row-major
};

// Parses the bytes of a .npy file; `name` is used in error messages.
Array parse_npy(std::span<const std::byte> bytes, std::string_view name);

// Reads a .npy file.
Array read_npy(const std::string& path);

// The bytes of a .npy file holding values (row-major, product(shape) of them) as dtype.
std::vector<std::byte> encode_npy(std::span<const double> values, std::span<const int64_t> shape, DType dtype);

// Writes encode_npy(values, shape, dtype) to path atomically: to a temporary file in the same
// folder, then renamed.
void write_npy(const std::string& path, std::span<const double> values, std::span<const int64_t> shape, DType dtype);

}  // namespace addnorm::io
