// addnorm norm: reading the input (command-line values, .npy, CSV, standard input) and the
// --gamma/--beta lists.
#include <cctype>
#include <iostream>
#include <iterator>

#include "addnorm/core/error.hpp"
#include "addnorm/io/csv.hpp"
#include "addnorm/io/npy.hpp"
#include "norm.hpp"

namespace addnorm::cli::norm {
namespace {

constexpr const char* fn = "norm";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

Input from_table(io::Table t, std::string source) {
  Input in;
  in.source = std::move(source);
  in.shape = {t.rows, t.cols};
  in.x = std::move(t.values);
  in.names = std::move(t.header);
  return in;
}

Input from_npy(const std::string& path) {
  io::Array a = io::read_npy(path);
  require(a.shape.size() == 1 || a.shape.size() == 2, fn, path, ": expected a 1-D or 2-D array, got shape ",
          shape_text(a.shape));
  require(!a.values.empty(), fn, path, ": empty input (shape ", shape_text(a.shape), ")");
  Input in;
  in.source = path;
  in.shape = std::move(a.shape);
  in.x = std::move(a.values);
  in.dtype = a.dtype == io::DType::f32 ? io::DType::f32 : io::DType::f64;
  return in;
}

}  // namespace

bool is_npy_path(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".npy";
}

bool is_csv_path(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".csv";
}

Input load_input(const std::vector<std::string>& values, const std::optional<std::string>& input_path) {
  if (input_path) {
    if (*input_path == "-") {
      const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      require(!std::cin.bad(), fn, "<stdin>: cannot read standard input");
      return from_table(io::parse_csv(text, "<stdin>"), "<stdin>");
    }
    if (is_npy_path(*input_path)) return from_npy(*input_path);
    return from_table(io::read_csv(*input_path), *input_path);
  }
  Input in;

  for (size_t i = 0; i < values.size(); ++i) {
    const std::optional<double> v = io::parse_number(values[i]);
    require(v.has_value(), fn, "command line, value ", i + 1, ": '", values[i], "' is not a number");
    in.x.push_back(*v);
  }
  require(!in.x.empty(), fn, "empty input: give the values of one row, or --input FILE");
  in.shape = {static_cast<int64_t>(in.x.size())};
  return in;
}

std::vector<double> parse_list(const std::string& text, const char* option) {
  std::vector<double> out;
  size_t start = 0;
  for (size_t k = 1;; ++k) {
    const size_t comma = text.find(',', start);
    std::string tok = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    const std::optional<double> v = io::parse_number(tok);
    require(v.has_value(), fn, option, " value ", k, ": '", tok, "' is not a number");
    out.push_back(*v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace addnorm::cli::norm
