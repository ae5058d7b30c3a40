// io: .npy parsing and encoding. Round trips of every dtype and shape, the three format
// versions, and each documented error with its message. (NumPy itself reads and writes these
// files in tests/cli/test_norm_cli.py.)
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/io/atomic_file.hpp"
#include "addnorm/io/npy.hpp"
#include "temp_dir.hpp"

namespace {

using addnorm::io::DType;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());  // data() may be null when empty
  return out;
}

// A .npy file with the given header dict (padded and terminated like NumPy's) and raw data.
std::vector<std::byte> npy_file(std::string_view dict, std::string_view data, int major = 1) {
  std::string header(dict);
  const size_t prefix = major == 1 ? 10 : 12;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::string s = "\x93NUMPY";
  s += static_cast<char>(major);
  s += '\0';
  const auto len = static_cast<uint32_t>(header.size());
  s += static_cast<char>(len & 0xff);
  s += static_cast<char>((len >> 8) & 0xff);
  if (major != 1) {
    s += static_cast<char>((len >> 16) & 0xff);
    s += static_cast<char>(len >> 24);
  }
  return bytes_of(s + header + std::string(data));
}

std::string f64_data(std::initializer_list<double> v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

std::string error_of(const std::vector<std::byte>& file) {
  try {
    addnorm::io::parse_npy(file, "x.npy");
  } catch (const addnorm::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Npy, DescrAndSize) {
  EXPECT_EQ(addnorm::io::npy_descr(DType::f32), "<f4");
  EXPECT_EQ(addnorm::io::npy_descr(DType::f64), "<f8");
  EXPECT_EQ(addnorm::io::npy_descr(DType::i32), "<i4");
  EXPECT_EQ(addnorm::io::npy_descr(DType::i64), "<i8");
  EXPECT_EQ(addnorm::io::dtype_size(DType::f32), 4u);
  EXPECT_EQ(addnorm::io::dtype_size(DType::i64), 8u);
}

TEST(Npy, RoundTripEveryDtypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {0, 4}, {1, 1, 2}};
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (const auto& shape : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<double> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i * 3 - 5));
      const auto file = addnorm::io::encode_npy(v, shape, dt);
      // The data starts at a multiple of 64 bytes and the header ends with a newline.
      const size_t data_start = file.size() - v.size() * addnorm::io::dtype_size(dt);
      EXPECT_EQ(data_start % 64, 0u);
      EXPECT_EQ(static_cast<char>(file[data_start - 1]), '\n');
      const addnorm::io::Array a = addnorm::io::parse_npy(file, "t.npy");
      EXPECT_EQ(a.dtype, dt);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.values, v);
    }
  }
}

TEST(Npy, HeaderTextIsNumpys) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> shape = {2, 3};
  const auto file = addnorm::io::encode_npy(v, shape, DType::f64);
  const std::string text(reinterpret_cast<const char*>(file.data()), 128);
  EXPECT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(text.substr(10, 59), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
  const std::vector<int64_t> one = {6};
  const auto file1 = addnorm::io::encode_npy(v, one, DType::f32);
  EXPECT_NE(std::string(reinterpret_cast<const char*>(file1.data()), 128).find("'shape': (6,), }"), std::string::npos);
}

TEST(Npy, F32RoundsAndSaturatesWithoutUndefinedBehaviour) {
  const std::vector<double> v = {0.1, 1e300, -1e300, static_cast<double>(FLT_MAX) * (1 + 1e-12),
                                 std::numeric_limits<double>::quiet_NaN()};
  const std::vector<int64_t> shape = {5};
  const auto a = addnorm::io::parse_npy(addnorm::io::encode_npy(v, shape, DType::f32), "t.npy");
  EXPECT_EQ(a.values[0], static_cast<double>(0.1f));
  EXPECT_EQ(a.values[1], std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.values[2], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.values[3], static_cast<double>(FLT_MAX));
  EXPECT_TRUE(std::isnan(a.values[4]));
}

TEST(Npy, EncodeChecksItsArguments) {
  const std::vector<double> v = {1.5, 2};
  const std::vector<int64_t> two = {2}, three = {3}, neg = {-2};
  EXPECT_THROW(addnorm::io::encode_npy(v, three, DType::f64), addnorm::Error);
  EXPECT_THROW(addnorm::io::encode_npy(v, neg, DType::f64), addnorm::Error);
  EXPECT_THROW(addnorm::io::encode_npy(v, two, DType::i32), addnorm::Error);  // 1.5 is not an integer
  const std::vector<double> big = {3e9, 0};
  EXPECT_THROW(addnorm::io::encode_npy(big, two, DType::i32), addnorm::Error);
  EXPECT_NO_THROW(addnorm::io::encode_npy(big, two, DType::i64));
}

TEST(Npy, FormatVersions2And3AndPython2Longs) {
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  for (int major : {2, 3}) {
    const auto a = addnorm::io::parse_npy(npy_file(dict, f64_data({1.5, -2}), major), "v.npy");
    EXPECT_EQ(a.values, (std::vector<double>{1.5, -2}));
  }
  const auto b = addnorm::io::parse_npy(
      npy_file("{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(1L,2L)}", f64_data({3, 4})), "v.npy");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{1, 2}));
  // Keys in any order, Fortran order where it equals C order (1-D).
  const auto c = addnorm::io::parse_npy(
      npy_file("{'shape': (2,), 'fortran_order': True, 'descr': '<f8'}", f64_data({5, 6})), "v.npy");
  EXPECT_EQ(c.values, (std::vector<double>{5, 6}));
}

TEST(Npy, IntegersConvertExactlyUpTo2To53) {
  std::string data(16, '\0');
  const int64_t ok = int64_t{1} << 53, bad = (int64_t{1} << 53) + 1;
  std::memcpy(data.data(), &ok, 8);
  std::memcpy(data.data() + 8, &bad, 8);
  const auto file = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", data);
  EXPECT_EQ(error_of(file),
            "[read_npy] x.npy: value 9007199254740993 at index 1 is beyond 2^53 and has no exact double");
  const auto first = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", data.substr(0, 8));
  EXPECT_EQ(addnorm::io::parse_npy(first, "x.npy").values[0], 9007199254740992.0);
}

// Each documented error, with its message.
TEST(Npy, Errors) {
  const std::string f8_2 = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  const std::string two = f64_data({1, 2});
  EXPECT_EQ(error_of(bytes_of("")), "[read_npy] x.npy: bad magic string (not a .npy file)");
  EXPECT_EQ(error_of(bytes_of("1,2,3\n4,5,6\n")), "[read_npy] x.npy: bad magic string (not a .npy file)");
  auto v4 = npy_file(f8_2, two);
  v4[6] = std::byte{4};
  EXPECT_EQ(error_of(v4), "[read_npy] x.npy: unsupported format version 4.0 (expected 1.0, 2.0 or 3.0)");
  EXPECT_EQ(error_of(bytes_of(std::string("\x93NUMPY\x01\x00\x7f", 9))), "[read_npy] x.npy: truncated header");
  EXPECT_EQ(error_of(bytes_of(std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17))),
            "[read_npy] x.npy: truncated header: 64 bytes announced, 7 present");
  EXPECT_EQ(error_of(bytes_of(std::string("\x93NUMPY\x02\x00\x00\x00\x01\x00", 12))),
            "[read_npy] x.npy: header of 65536 bytes is larger than the limit of 10000");
  // Corrupt headers.
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False}", two)),
            "[read_npy] x.npy: corrupt header: no 'shape'");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'x': 1}", two)),
            "[read_npy] x.npy: corrupt header: unexpected key 'x'");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", two)),
            "[read_npy] x.npy: header repeats 'descr'");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': 0, 'shape': (2,)}", two)),
            "[read_npy] x.npy: corrupt header at byte 34: expected True or False");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,)}", two)),
            "[read_npy] x.npy: corrupt header at byte 51: expected a non-negative integer");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)", two)),
            "[read_npy] x.npy: corrupt header at byte 118: expected '}'");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)} x", two)),
            "[read_npy] x.npy: corrupt header: unexpected text after the dict");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8, 'fortran_order': False, 'shape': (2,)}", two)),
            "[read_npy] x.npy: corrupt header at byte 17: expected '}'");
  EXPECT_EQ(error_of(npy_file("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,)}", two)),
            "[read_npy] x.npy: structured dtypes are not supported");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,)}", two)),
            "[read_npy] x.npy: corrupt header at byte 70: dimension too large");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", two)),
            "[read_npy] x.npy: shape (4294967296, 4294967296) is too large");
  // Layout and dtype.
  EXPECT_EQ(error_of(npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (1, 2), }", two)),
            "[read_npy] x.npy: Fortran order is not supported (shape (1, 2)); save a C-ordered array, e.g. "
            "numpy.ascontiguousarray");
  EXPECT_EQ(error_of(npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", "abcd")),
            "[read_npy] x.npy: unsupported dtype '<f2' (expected <f4, <f8, <i4 or <i8)");
  EXPECT_EQ(error_of(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "ab")),
            "[read_npy] x.npy: unsupported dtype '|u1' (expected <f4, <f8, <i4 or <i8)");
  EXPECT_EQ(error_of(npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", two)),
            "[read_npy] x.npy: big-endian data ('>f8') is not supported");
  // Data size.
  EXPECT_EQ(error_of(npy_file(f8_2, two.substr(0, 12))),
            "[read_npy] x.npy: truncated data: shape (2,) of <f8 needs 16 bytes, the file has 12");
  EXPECT_EQ(error_of(npy_file(f8_2, two + "12345678")),
            "[read_npy] x.npy: shape (2,) of <f8 needs 16 bytes of data but the file has 24 (the shape does not "
            "match the file size)");
}

TEST(Npy, ReadAndWriteFiles) {
  addnorm::test::TempDir dir;
  const std::string path = dir.file("y.npy");
  const std::vector<double> v = {1, -2.5, 3};
  const std::vector<int64_t> shape = {3};
  addnorm::io::write_npy(path, v, shape, DType::f64);
  const auto a = addnorm::io::read_npy(path);
  EXPECT_EQ(a.values, v);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"y.npy"});
  try {
    addnorm::io::read_npy(dir.file("none.npy"));
    FAIL() << "no error";
  } catch (const addnorm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("none.npy: cannot open: No such file or directory"), std::string::npos);
  }
  // A failed write leaves the old file as it was.
  const std::vector<double> bad = {0.5};
  const std::vector<int64_t> one = {1};
  EXPECT_THROW(addnorm::io::write_npy(path, bad, one, DType::i32), addnorm::Error);
  EXPECT_EQ(addnorm::io::read_npy(path).values, v);
}

}  // namespace
