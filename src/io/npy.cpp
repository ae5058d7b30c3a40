// .npy reading and writing. The header is a Python dict literal such as
//   {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// parsed here by a small recursive-descent parser that accepts exactly what NumPy writes (and
// Python 2's "3L" integers), nothing else.
#include "addnorm/io/npy.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "addnorm/core/error.hpp"
#include "addnorm/io/atomic_file.hpp"

namespace addnorm::io {
namespace {

constexpr const char* kRead = "read_npy";
constexpr std::array<unsigned char, 6> kMagic = {0x93, 'N', 'U', 'M', 'P', 'Y'};

// Loads a little-endian T from p.
template <class T>
T load_le(const std::byte* p) {
  std::array<std::byte, sizeof(T)> b;
  std::memcpy(b.data(), p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b.begin(), b.end());
  T v;
  std::memcpy(&v, b.data(), sizeof(T));
  return v;
}

// Appends v as little-endian bytes.
template <class T>
void store_le(std::vector<std::byte>& out, T v) {
  std::array<std::byte, sizeof(T)> b;
  std::memcpy(b.data(), &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b.begin(), b.end());
  out.insert(out.end(), b.begin(), b.end());
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// The header dict's three entries.
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : s_(text), name_(name) {}

  Header parse() {
    Header h;
    ws();
    expect('{');
    ws();
    while (!peek('}')) {
      const std::string key = string_literal();
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        require(!h.descr, kRead, name_, ": header repeats 'descr'");
        if (peek('[')) fail(kRead, name_, ": structured dtypes are not supported");
        h.descr = string_literal();
      } else if (key == "fortran_order") {
        require(!h.fortran_order, kRead, name_, ": header repeats 'fortran_order'");
        h.fortran_order = boolean();
      } else if (key == "shape") {
        require(!h.shape, kRead, name_, ": header repeats 'shape'");
        h.shape = tuple();
      } else {
        fail(kRead, name_, ": corrupt header: unexpected key '", key, "'");
      }
      ws();
      if (!eat(',')) break;
      ws();
    }
    expect('}');
    ws();
    require(i_ == s_.size(), kRead, name_, ": corrupt header: unexpected text after the dict");
    require(h.descr.has_value(), kRead, name_, ": corrupt header: no 'descr'");
    require(h.fortran_order.has_value(), kRead, name_, ": corrupt header: no 'fortran_order'");
    require(h.shape.has_value(), kRead, name_, ": corrupt header: no 'shape'");
    return h;
  }

 private:
  [[noreturn]] void corrupt(std::string_view what) const {
    fail(kRead, name_, ": corrupt header at byte ", i_, ": ", what);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  [[nodiscard]] bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++i_;
    return true;
  }
  void expect(char c) {
    if (!eat(c)) corrupt(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    if (!peek('\'') && !peek('"')) corrupt("expected a string");
    const char quote = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\' || s_[i_] == '\n') corrupt("unsupported character in a string");
      ++i_;
    }
    if (i_ >= s_.size()) corrupt("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    corrupt("expected True or False");
  }
  int64_t integer() {
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') corrupt("expected a non-negative integer");
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const int digit = s_[i_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) corrupt("dimension too large");
      v = v * 10 + digit;
    }
    eat('L');  // Python 2 long
    return v;
  }
  std::vector<int64_t> tuple() {
    expect('(');
    ws();
    std::vector<int64_t> dims;
    while (!peek(')')) {
      if (dims.size() >= 64) corrupt("more than 64 dimensions");
      dims.push_back(integer());
      ws();
      if (!eat(',')) break;
      ws();
    }
    expect(')');
    return dims;
  }

  std::string_view s_;
  std::string_view name_;
  size_t i_ = 0;
};

DType parse_descr(const std::string& descr, std::string_view name) {
  if (descr == "<f4") return DType::f32;
  if (descr == "<f8") return DType::f64;
  if (descr == "<i4") return DType::i32;
  if (descr == "<i8") return DType::i64;
  if (descr == ">f4" || descr == ">f8" || descr == ">i4" || descr == ">i8")
    fail(kRead, name, ": big-endian data ('", descr, "') is not supported");
  fail(kRead, name, ": unsupported dtype '", descr, "' (expected <f4, <f8, <i4 or <i8)");
}

// Element count of a shape, or an error if it overflows int64.
int64_t element_count(std::span<const int64_t> shape, std::string_view name) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    require(n <= std::numeric_limits<int64_t>::max() / d, kRead, name, ": shape ", shape_text(shape), " is too large");
    n *= d;
  }
  return n;
}

// Rounds a double to float without the undefined behaviour of an out-of-range cast.
float to_f32(double v) {
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(FLT_MAX)) {
    // Values within half an ulp of FLT_MAX round to it; beyond, to infinity.
    const double limit = static_cast<double>(FLT_MAX) + std::ldexp(1.0, 103);
    const float mag = std::fabs(v) < limit ? FLT_MAX : std::numeric_limits<float>::infinity();
    return v < 0 ? -mag : mag;
  }
  return static_cast<float>(v);
}

}  // namespace

std::string_view npy_descr(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::i32:
      return "<i4";
    case DType::i64:
      return "<i8";
  }
  return "?";
}

size_t dtype_size(DType dtype) { return dtype == DType::f32 || dtype == DType::i32 ? 4 : 8; }

Array parse_npy(std::span<const std::byte> bytes, std::string_view name) {
  require(bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0, kRead, name,
          ": bad magic string (not a .npy file)");
  const auto major = static_cast<unsigned>(bytes[6]);
  const auto minor = static_cast<unsigned>(bytes[7]);
  require((major == 1 || major == 2 || major == 3) && minor == 0, kRead, name, ": unsupported format version ", major,
          ".", minor, " (expected 1.0, 2.0 or 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  require(bytes.size() >= 8 + len_bytes, kRead, name, ": truncated header");
  const size_t header_len =
      major == 1 ? load_le<uint16_t>(bytes.data() + 8) : static_cast<size_t>(load_le<uint32_t>(bytes.data() + 8));
  const size_t header_start = 8 + len_bytes;
  require(header_len <= kMaxNpyHeader, kRead, name, ": header of ", header_len, " bytes is larger than the limit of ",
          kMaxNpyHeader);
  require(bytes.size() - header_start >= header_len, kRead, name, ": truncated header: ", header_len,
          " bytes announced, ", bytes.size() - header_start, " present");
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + header_start), header_len);

  const Header h = HeaderParser(header_text, name).parse();
  Array a;
  a.dtype = parse_descr(*h.descr, name);
  a.shape = *h.shape;
  require(!*h.fortran_order || a.shape.size() <= 1, kRead, name, ": Fortran order is not supported (shape ",
          shape_text(a.shape), "); save a C-ordered array, e.g. numpy.ascontiguousarray");

  const int64_t count = element_count(a.shape, name);
  const size_t item = dtype_size(a.dtype);
  const size_t data_start = header_start + header_len;
  const size_t have = bytes.size() - data_start;
  require(static_cast<uint64_t>(count) <= std::numeric_limits<size_t>::max() / item, kRead, name, ": shape ",
          shape_text(a.shape), " is too large");
  const size_t need = static_cast<size_t>(count) * item;
  require(have >= need, kRead, name, ": truncated data: shape ", shape_text(a.shape), " of ", *h.descr, " needs ", need,
          " bytes, the file has ", have);
  require(have == need, kRead, name, ": shape ", shape_text(a.shape), " of ", *h.descr, " needs ", need,
          " bytes of data but the file has ", have, " (the shape does not match the file size)");

  a.values.resize(static_cast<size_t>(count));
  const std::byte* p = bytes.data() + data_start;
  for (size_t k = 0; k < a.values.size(); ++k, p += item) {
    switch (a.dtype) {
      case DType::f32:
        a.values[k] = static_cast<double>(load_le<float>(p));
        break;
      case DType::f64:
        a.values[k] = load_le<double>(p);
        break;
      case DType::i32:
        a.values[k] = static_cast<double>(load_le<int32_t>(p));
        break;
      case DType::i64: {
        const auto v = load_le<int64_t>(p);
        constexpr int64_t kExact = int64_t{1} << 53;
        require(v >= -kExact && v <= kExact, kRead, name, ": value ", v, " at index ", k,
                " is beyond 2^53 and has no exact double");
        a.values[k] = static_cast<double>(v);
        break;
      }
    }
  }
  return a;
}

Array read_npy(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse_npy(bytes, path);
}

std::vector<std::byte> encode_npy(std::span<const double> values, std::span<const int64_t> shape, DType dtype) {
  constexpr const char* fn = "write_npy";
  for (int64_t d : shape) require(d >= 0, fn, "negative dimension in shape ", shape_text(shape));
  // As when reading: a shape with a 0 holds no values, however large its other dimensions.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t count = empty ? 0 : 1;
  for (int64_t d : shape) {
    if (empty) break;
    require(count <= std::numeric_limits<int64_t>::max() / d, fn, "shape ", shape_text(shape), " is too large");
    count *= d;
  }
  require(count == static_cast<int64_t>(values.size()), fn, "shape ", shape_text(shape), " holds ", count,
          " values, got ", values.size());

  std::string header = "{'descr': '" + std::string(npy_descr(dtype)) +
                       "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes; end with '\n'.
  // Version 1.0 has a 2-byte header length; longer headers need version 2.0.
  auto padded_total = [&](size_t prefix) { return (prefix + header.size() + 1 + 63) / 64 * 64; };
  const bool v1 = padded_total(10) - 10 <= 65535;
  const size_t prefix = v1 ? 10 : 12;
  const size_t total = padded_total(prefix);
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  std::vector<std::byte> out;
  out.reserve(total + values.size() * dtype_size(dtype));
  for (unsigned char c : kMagic) out.push_back(static_cast<std::byte>(c));
  out.push_back(static_cast<std::byte>(v1 ? 1 : 2));
  out.push_back(std::byte{0});
  if (v1)
    store_le<uint16_t>(out, static_cast<uint16_t>(header.size()));
  else
    store_le<uint32_t>(out, static_cast<uint32_t>(header.size()));
  for (char c : header) out.push_back(static_cast<std::byte>(c));

  for (size_t k = 0; k < values.size(); ++k) {
    const double v = values[k];
    switch (dtype) {
      case DType::f32:
        store_le<float>(out, to_f32(v));
        break;
      case DType::f64:
        store_le<double>(out, v);
        break;
      case DType::i32:
        require(std::trunc(v) == v && v >= -2147483648.0 && v <= 2147483647.0, fn, "value ", v, " at index ", k,
                " is not an int32");
        store_le<int32_t>(out, static_cast<int32_t>(v));
        break;
      case DType::i64:
        require(std::trunc(v) == v && v >= -9223372036854775808.0 && v < 9223372036854775808.0, fn, "value ", v,
                " at index ", k, " is not an int64");
        store_le<int64_t>(out, static_cast<int64_t>(v));
        break;
    }
  }
  return out;
}

void write_npy(const std::string& path, std::span<const double> values, std::span<const int64_t> shape, DType dtype) {
  write_file_atomic(path, encode_npy(values, shape, dtype));
}

}  // namespace addnorm::io
