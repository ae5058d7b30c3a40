// addnorm norm, the parts shared by its files: the input (from the command line, a .npy or a CSV
// file), the computed result, and the printers and writers.
//   norm_command.cpp  options and orchestration
//   norm_input.cpp    reading and checking the input, gamma and beta
//   norm_explain.cpp  the step-by-step text of --explain
//   norm_output.cpp   plain, --json and --output
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "addnorm/io/npy.hpp"
#include "addnorm/norm/reference.hpp"

namespace addnorm::cli::norm {

enum class Kind { layer, rms, batch };

const char* kind_name(Kind kind);

// The numbers to normalize.
struct Input {
  std::string source;                // a file name, "<stdin>", or empty for the command line
  std::vector<int64_t> shape;        // {d} (one row) or {rows, cols}
  std::vector<double> x;             // product(shape) values, row-major
  io::DType dtype = io::DType::f64;  // for --output .npy: f32 stays f32, everything else is f64
  std::vector<std::string> names;    // column names from a CSV header, or empty

  [[nodiscard]] int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  [[nodiscard]] int64_t cols() const { return shape.back(); }
};

// Reads VALUES (tokens from the command line) or --input FILE ("-": CSV from standard input).
Input load_input(const std::vector<std::string>& values, const std::optional<std::string>& input_path);

// Parses "v,v,..." (--gamma, --beta); option names the option in error messages.
std::vector<double> parse_list(const std::string& text, const char* option);

// What was computed. For layer and rms norm, groups are the rows; for batch norm, the columns
// (a 1-D input is one column: its values are the batch). f holds the reference's statistics, one
// entry per group, and x_hat and y in the input's row-major order.
struct Result {
  Kind kind = Kind::layer;
  double eps = 1e-5;
  Input in;
  std::vector<double> gamma, beta;  // empty: 1 and 0
  ref::Forward f;

  // The shape the reference computed on: (rows, cols), or (d, 1) for batch norm of a 1-D input.
  [[nodiscard]] int64_t calc_rows() const { return f.rows; }
  [[nodiscard]] int64_t calc_cols() const { return f.cols; }
  [[nodiscard]] int64_t groups() const { return kind == Kind::batch ? f.cols : f.rows; }
  // The values of group g (a row, or a column for batch norm), in order.
  [[nodiscard]] std::vector<double> group(const std::vector<double>& m, int64_t g) const;
  // The input's name for group g: "row 2", "column 3 (price)".
  [[nodiscard]] std::string group_label(int64_t g) const;
  // Group g for messages: "row 2 of house.csv", "the values on the command line".
  [[nodiscard]] std::string where(int64_t g) const;
};

// Normalizes; throws Error for a group that cannot be normalized (variance 0 with eps = 0, or a
// variance that overflows).
Result compute(Kind kind, double eps, Input in, std::vector<double> gamma, std::vector<double> beta);

// Groups whose values hold a NaN or an infinity (their y is NaN).
std::vector<int64_t> nonfinite_groups(const Result& r);

void print_plain(const Result& r, int precision, std::ostream& os);
void print_explain(const Result& r, int precision, std::ostream& os);
// One JSON object: kind, eps, shape, mean, var, rstd, x_hat, y (full precision), and, when
// explain_text is not empty, "explain" with it.
void print_json(const Result& r, std::ostream& os, const std::string& explain_text);

// Writes y to path: .npy (the input's dtype) or .csv (with the input's column names), atomically.
void write_output(const Result& r, const std::string& path);

// True when path ends in .npy or .csv (any case).
bool is_npy_path(const std::string& path);
bool is_csv_path(const std::string& path);

}  // namespace addnorm::cli::norm
