// io: CSV parsing (separators, header, quotes, comments) and writing, and each documented error
// with its message.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/io/csv.hpp"
#include "temp_dir.hpp"

namespace {

using addnorm::io::parse_csv;
using addnorm::io::parse_number;
using addnorm::io::Table;

std::string error_of(std::string_view text) {
  try {
    parse_csv(text, "house.csv");
  } catch (const addnorm::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::vector<double> kHouse = {1200, 2, 45, 1500, 3, 70, 2000, 3.5, 80};

TEST(ParseNumber, AcceptsNumbersOnly) {
  EXPECT_EQ(parse_number("1200"), 1200.0);
  EXPECT_EQ(parse_number("-1"), -1.0);
  EXPECT_EQ(parse_number("+2.5"), 2.5);
  EXPECT_EQ(parse_number(".5"), 0.5);
  EXPECT_EQ(parse_number("5."), 5.0);
  EXPECT_EQ(parse_number("1e-3"), 1e-3);
  EXPECT_EQ(parse_number("-1.5E+2"), -150.0);
  EXPECT_TRUE(std::isnan(*parse_number("nan")));
  EXPECT_EQ(parse_number("-Infinity"), -std::numeric_limits<double>::infinity());
  for (const char* bad : {"", "+", "-", "abc", "1,5", "1.2.3", "0x10", " 1", "1 ", "++1", "+-1", "1e", "e5", "--1"})
    EXPECT_FALSE(parse_number(bad).has_value()) << "'" << bad << "'";
  EXPECT_FALSE(parse_number("1e999").has_value());
}

TEST(ShortestNumber, RoundTrips) {
  EXPECT_EQ(addnorm::io::shortest_number(0.1), "0.1");
  EXPECT_EQ(addnorm::io::shortest_number(-2), "-2");
  EXPECT_EQ(addnorm::io::shortest_number(1e-5), "1e-05");
  EXPECT_EQ(addnorm::io::shortest_number(std::numeric_limits<double>::infinity()), "inf");
  for (double v : {1.0 / 3, -0.20203050891044239, 1e300, 5e-324})
    EXPECT_EQ(parse_number(addnorm::io::shortest_number(v)), v);
}

TEST(Csv, HouseTableWithHeader) {
  const Table t = parse_csv("size,rooms,price\n1200,2,45\n1500,3,70\n2000,3.5,80\n", "house.csv");
  EXPECT_EQ(t.header, (std::vector<std::string>{"size", "rooms", "price"}));
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.cols, 3);
  EXPECT_EQ(t.values, kHouse);
}

TEST(Csv, SeparatorsLineEndingsCommentsAndBlankLines) {
  const std::vector<std::string> texts = {
      "1200,2,45\n1500,3,70\n2000,3.5,80",                                                    // no final newline
      "1200, 2, 45\r\n1500 ,3 ,70\r\n2000,3.5,80\r\n",                                        // CRLF, spaces
      "1200;2;45\n1500;3;70\n2000;3.5;80\n",                                                  // semicolons
      "1200 2 45\n1500\t3   70\n  2000 3.5 80  \n",                                           // whitespace
      "\xEF\xBB\xBF# size,rooms,price\n\n1200,2,45\n  \n1500,3,70\n# note\n2000,3.5,80\n\n",  // BOM, comments
      "\"1200\",\"2\",\"45\"\n1500,3,70\n2000,3.5,80\n",                                      // quoted numbers
  };
  for (const std::string& text : texts) {
    const Table t = parse_csv(text, "t.csv");
    EXPECT_TRUE(t.header.empty()) << text;
    EXPECT_EQ(t.rows, 3) << text;
    EXPECT_EQ(t.values, kHouse) << text;
  }
}

TEST(Csv, QuotedHeaderNames) {
  const Table t = parse_csv("\"size, sq ft\",\"say \"\"hi\"\"\",\n1,2,3\n", "t.csv");
  EXPECT_EQ(t.header, (std::vector<std::string>{"size, sq ft", "say \"hi\"", ""}));
  const Table w = parse_csv("\"house size\" rooms\n1 2\n", "t.csv");
  EXPECT_EQ(w.header, (std::vector<std::string>{"house size", "rooms"}));
}

TEST(Csv, OneValue) {
  const Table t = parse_csv("-7\n", "t.csv");
  EXPECT_EQ(t.rows, 1);
  EXPECT_EQ(t.cols, 1);
  EXPECT_EQ(t.values, std::vector<double>{-7});
}

// Each documented error, with its message.
TEST(Csv, Errors) {
  EXPECT_EQ(error_of("size,rooms\n1200,2\n1500,abc\n"), "[read_csv] house.csv:3:2: 'abc' is not a number");
  EXPECT_EQ(error_of("1200,2,45\n1500,3,7O\n"), "[read_csv] house.csv:2:3: '7O' is not a number");
  EXPECT_EQ(error_of("1,abc,3\n"), "[read_csv] house.csv:1:2: 'abc' is not a number");  // mixed: not a header
  EXPECT_EQ(error_of(""), "[read_csv] house.csv: empty input (no numbers)");
  EXPECT_EQ(error_of("\n  \n# only a comment\n"), "[read_csv] house.csv: empty input (no numbers)");
  EXPECT_EQ(error_of("size,rooms,price\n"), "[read_csv] house.csv: no data rows after the header on line 1");
  EXPECT_EQ(error_of("1200,2,45\n1500,3\n"), "[read_csv] house.csv:2: row has 2 values, expected 3 like line 1");
  EXPECT_EQ(error_of("\nsize,rooms\n1,2\n1,2,3\n"),
            "[read_csv] house.csv:4: row has 3 values, the header on line 2 has 2 names");
  EXPECT_EQ(error_of("1,,3\n"), "[read_csv] house.csv:1:2: empty field");
  EXPECT_EQ(error_of("1,2,\n"), "[read_csv] house.csv:1:3: empty field");
  EXPECT_EQ(error_of("\"size,rooms\n1,2\n"), "[read_csv] house.csv:1:1: unterminated quoted field");
  EXPECT_EQ(error_of("\"a\"b,c\n1,2\n"), "[read_csv] house.csv:1:1: unexpected text after a quoted field: 'b,c'");
  EXPECT_EQ(error_of("1,1e999\n"), "[read_csv] house.csv:1:2: '1e999' is out of the range of a double");
  EXPECT_EQ(error_of("1;2\n3,4;5\n"), "[read_csv] house.csv:2:1: '3,4' is not a number");
  // Tokens in messages are cut and made printable.
  EXPECT_EQ(error_of(std::string("1,\x01") + std::string(50, 'x') + "\n"),
            "[read_csv] house.csv:1:2: '?xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is not a number");
}

TEST(Csv, FormatAndWriteRoundTrip) {
  Table t;
  t.header = {
      "\xEF\xBB\xBF"
      "bom",
      "size",
      "a,b",
      " padded",
      "#hash",
      "",
      "q\"uote"};
  t.rows = 2;
  t.cols = 7;
  t.values = {1.0 / 3, -0.202, 1e300, -5e-324, 0, std::numeric_limits<double>::infinity(), -1, 1, 2, 3, 4, 5, 6, 7};
  const std::string text = addnorm::io::format_csv(t);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "\"\xEF\xBB\xBF\x62om\",size,\"a,b\",\" padded\",\"#hash\",\"\",\"q\"\"uote\"");
  const Table back = parse_csv(text, "t.csv");
  EXPECT_EQ(back.header, t.header);
  EXPECT_EQ(back.values, t.values);

  addnorm::test::TempDir dir;
  addnorm::io::write_csv(dir.file("y.csv"), t);
  const Table read = addnorm::io::read_csv(dir.file("y.csv"));
  EXPECT_EQ(read.values, t.values);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"y.csv"});

  Table wrong = t;
  wrong.values.pop_back();
  EXPECT_THROW(addnorm::io::format_csv(wrong), addnorm::Error);
}

}  // namespace
