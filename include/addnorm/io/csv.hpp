// CSV files of numbers: rows of numbers, an optional header line of names, fields separated by
// commas, semicolons or whitespace.
//
// The rules, in order:
// - a UTF-8 byte order mark is skipped; lines end in "\n" or "\r\n"; blank lines and lines whose
//   first non-blank character is '#' (NumPy's savetxt header) are skipped;
// - the first remaining line sets the separator: ',' if it holds a comma, else ';' if it holds a
//   semicolon, else runs of spaces and tabs;
// - that line is a header of names when none of its fields is a number; otherwise it is data;
// - a field may be quoted with double quotes ("" inside is one quote); spaces around fields are
//   ignored;
// - every data field must be a number (see parse_number), every row as long as the first.
// Errors throw addnorm::Error naming the source, line and field, e.g.
// "[read_csv] house.csv:3:2: 'abc' is not a number" (line 3, field 2).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace addnorm::io {

struct Table {
  std::vector<std::string> header;  // column names; empty when the input has no header line
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // rows * cols values, row-major
};

// Parses a whole token as a number: decimal or scientific notation with an optional sign
// ("-1", "+2.5", ".5", "1e-3"), or "nan", "inf", "infinity" in any case. Returns nullopt for
// anything else and for values out of the range of a double.
std::optional<double> parse_number(std::string_view token);

// The shortest text that parses back to exactly v ("0.1", "-2", "1e+20", "nan", "-inf").
std::string shortest_number(double v);

// Parses CSV text; `name` (a file name, or "<stdin>") is used in error messages.
Table parse_csv(std::string_view text, std::string_view name);

// Reads a CSV file.
Table read_csv(const std::string& path);

// CSV text of a table: the header line when there are names, then one line per row, values
// comma-separated in shortest round-trip form. Names are quoted where needed.
std::string format_csv(const Table& table);

// Writes format_csv(table) to path atomically.
void write_csv(const std::string& path, const Table& table);

}  // namespace addnorm::io
