// addnorm norm: plain output (y), --json (everything, full precision) and --output (y as .npy or
// .csv, written atomically).
#include <nlohmann/json.hpp>

#include "addnorm/core/error.hpp"
#include "addnorm/io/csv.hpp"
#include "addnorm/io/npy.hpp"
#include "format.hpp"
#include "norm.hpp"

namespace addnorm::cli::norm {
namespace {

// The rows of a row-major matrix as a JSON array of arrays.
nlohmann::ordered_json rows_json(const std::vector<double>& m, int64_t rows, int64_t cols) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < rows; ++r)
    out.push_back(std::vector<double>(m.begin() + r * cols, m.begin() + (r + 1) * cols));
  return out;
}

}  // namespace

void print_plain(const Result& r, int precision, std::ostream& os) {
  if (r.in.shape.size() == 1)
    os << fmt_vec(r.f.y, precision) << "\n";
  else
    os << fmt_matrix(r.f.y, r.in.rows(), r.in.cols(), precision) << "\n";
}

void print_json(const Result& r, std::ostream& os, const std::string& explain_text) {
  nlohmann::ordered_json j;
  j["kind"] = kind_name(r.kind);
  j["eps"] = r.eps;
  j["shape"] = r.in.shape;
  if (r.kind == Kind::rms)
    j["mean"] = nullptr;  // RMSNorm has no mean
  else
    j["mean"] = r.f.mean;
  j["var"] = r.f.var;  // for rms: the mean square
  j["rstd"] = r.f.rstd;
  j["x_hat"] = rows_json(r.f.x_hat, r.in.rows(), r.in.cols());
  j["y"] = rows_json(r.f.y, r.in.rows(), r.in.cols());
  if (!explain_text.empty()) j["explain"] = explain_text;
  os << j.dump() << "\n";
}

void write_output(const Result& r, const std::string& path) {
  if (is_npy_path(path)) {
    io::write_npy(path, r.f.y, r.in.shape, r.in.dtype);
    return;
  }
  require(is_csv_path(path), "norm", "--output ", path, ": the file name must end in .npy or .csv");
  io::Table t;
  t.rows = r.in.rows();
  t.cols = r.in.cols();
  t.values = r.f.y;
  t.header = r.in.names;
  io::write_csv(path, t);
}

}  // namespace addnorm::cli::norm
