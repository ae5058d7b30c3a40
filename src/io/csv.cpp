#include "addnorm/io/csv.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "addnorm/core/error.hpp"
#include "addnorm/io/atomic_file.hpp"

namespace addnorm::io {
namespace {

constexpr const char* kRead = "read_csv";

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// A token as it appears in an error message: non-printable bytes as '?', at most 40 characters.
std::string quote_token(std::string_view token) {
  std::string out;
  for (char c : token.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  if (token.size() > 40) out += "...";
  return "'" + out + "'";
}

struct Field {
  std::string text;
  bool quoted = false;
};

// Splits one line into fields. sep is ',' or ';', or ' ' for runs of blanks.
class LineSplitter {
 public:
  LineSplitter(std::string_view line, char sep, std::string_view name, int64_t line_no)
      : s_(line), sep_(sep), name_(name), line_no_(line_no) {}

  std::vector<Field> split() {
    std::vector<Field> fields;
    skip_blanks();
    if (sep_ == ' ' && i_ == s_.size()) return fields;
    for (;;) {
      fields.push_back(field(fields.size() + 1));
      if (i_ == s_.size()) break;
      // At a separator: consume it (a run of blanks in whitespace mode).
      ++i_;
      if (sep_ == ' ') {
        skip_blanks();
        if (i_ == s_.size()) break;
      }
    }
    return fields;
  }

 private:
  void skip_blanks() {
    while (i_ < s_.size() && is_blank(s_[i_])) ++i_;
  }
  [[nodiscard]] bool at_separator() const {
    return i_ < s_.size() && (sep_ == ' ' ? is_blank(s_[i_]) : s_[i_] == sep_);
  }
  Field field(size_t index) {
    skip_blanks();
    Field f;
    if (i_ < s_.size() && s_[i_] == '"') {
      f.quoted = true;
      ++i_;
      for (;;) {
        require(i_ < s_.size(), kRead, name_, ":", line_no_, ":", index, ": unterminated quoted field");
        if (s_[i_] == '"') {
          if (i_ + 1 < s_.size() && s_[i_ + 1] == '"') {
            f.text += '"';
            i_ += 2;
            continue;
          }
          ++i_;
          break;
        }
        f.text += s_[i_++];
      }
      const size_t after = i_;
      if (sep_ != ' ') skip_blanks();
      require(i_ == s_.size() || at_separator(), kRead, name_, ":", line_no_, ":", index,
              ": unexpected text after a quoted field: ", quote_token(s_.substr(after, 20)));
      return f;
    }
    const size_t start = i_;
    while (i_ < s_.size() && !at_separator()) ++i_;
    f.text = std::string(trim(s_.substr(start, i_ - start)));
    return f;
  }

  std::string_view s_;
  char sep_;
  std::string_view name_;
  int64_t line_no_;
  size_t i_ = 0;
};

char detect_separator(std::string_view line) {
  if (line.find(',') != std::string_view::npos) return ',';
  if (line.find(';') != std::string_view::npos) return ';';
  return ' ';
}

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// Whether a header name must be quoted to read back as itself: empty, starting like a comment or
// a byte order mark, or holding a separator, a quote or a blank (a one-column file is split on
// blanks).
bool needs_quotes(const std::string& name) {
  if (name.empty() || name.front() == '#' || name.starts_with(kBom)) return true;
  for (char c : name)
    if (c == ',' || c == ';' || c == '"' || c == '\n' || is_blank(c)) return true;
  return false;
}

}  // namespace

std::optional<double> parse_number(std::string_view token) {
  if (!token.empty() && token.front() == '+') {
    token.remove_prefix(1);
    if (token.empty() || token.front() == '-' || token.front() == '+') return std::nullopt;
  }
  if (token.empty()) return std::nullopt;
  double v = 0;
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string shortest_number(double v) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "nan";
  return std::string(buf, ptr);
}

Table parse_csv(std::string_view text, std::string_view name) {
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());
  Table t;
  char sep = 0;
  int64_t first_line = 0;  // the line that set the width (header or first data row)
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') continue;

    if (sep == 0) sep = detect_separator(content);
    std::vector<Field> fields = LineSplitter(line, sep, name, line_no).split();
    const auto n = static_cast<int64_t>(fields.size());

    if (first_line == 0) {
      first_line = line_no;
      t.cols = n;
      bool any_number = false;
      for (const Field& f : fields) any_number = any_number || parse_number(f.text).has_value();
      if (!any_number) {
        for (Field& f : fields) t.header.push_back(std::move(f.text));
        continue;
      }
    } else if (n != t.cols) {
      if (!t.header.empty())
        fail(kRead, name, ":", line_no, ": row has ", n, " values, the header on line ", first_line, " has ", t.cols,
             " names");
      fail(kRead, name, ":", line_no, ": row has ", n, " values, expected ", t.cols, " like line ", first_line);
    }
    for (size_t k = 0; k < fields.size(); ++k) {
      const std::string& tok = fields[k].text;
      require(!tok.empty(), kRead, name, ":", line_no, ":", k + 1, ": empty field");
      const std::optional<double> v = parse_number(tok);
      if (!v) {
        // Say "out of range" for numbers too large (or too small) for a double.
        double ignored = 0;
        const std::string_view body = tok.front() == '+' ? std::string_view(tok).substr(1) : std::string_view(tok);
        const auto r = std::from_chars(body.data(), body.data() + body.size(), ignored);
        if (r.ec == std::errc::result_out_of_range && r.ptr == body.data() + body.size())
          fail(kRead, name, ":", line_no, ":", k + 1, ": ", quote_token(tok), " is out of the range of a double");
        fail(kRead, name, ":", line_no, ":", k + 1, ": ", quote_token(tok), " is not a number");
      }
      t.values.push_back(*v);
    }
    ++t.rows;
  }
  require(first_line != 0, kRead, name, ": empty input (no numbers)");
  require(t.rows > 0, kRead, name, ": no data rows after the header on line ", first_line);
  return t;
}

Table read_csv(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse_csv(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

std::string format_csv(const Table& table) {
  constexpr const char* fn = "write_csv";
  require(table.rows >= 0 && table.cols >= 0 && table.values.size() == static_cast<size_t>(table.rows * table.cols), fn,
          "a ", table.rows, " x ", table.cols, " table needs ", table.rows * table.cols, " values, got ",
          table.values.size());
  require(table.header.empty() || static_cast<int64_t>(table.header.size()) == table.cols, fn, "header has ",
          table.header.size(), " names for ", table.cols, " columns");
  std::string out;
  for (size_t k = 0; k < table.header.size(); ++k) {
    if (k > 0) out += ',';
    const std::string& name = table.header[k];
    if (!needs_quotes(name)) {
      out += name;
      continue;
    }
    out += '"';
    for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    out += '"';
  }
  if (!table.header.empty()) out += '\n';
  for (int64_t r = 0; r < table.rows; ++r) {
    for (int64_t c = 0; c < table.cols; ++c) {
      if (c > 0) out += ',';
      out += shortest_number(table.values[static_cast<size_t>(r * table.cols + c)]);
    }
    out += '\n';
  }
  return out;
}

void write_csv(const std::string& path, const Table& table) { write_file_atomic(path, format_csv(table)); }

}  // namespace addnorm::io
