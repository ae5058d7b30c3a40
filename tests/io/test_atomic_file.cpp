// io: whole-file reads and atomic writes (no partial file, no temporary left behind).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/io/atomic_file.hpp"
#include "temp_dir.hpp"

namespace {

using addnorm::test::TempDir;

std::string slurp(const std::string& path) {
  const auto bytes = addnorm::io::read_file(path);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const addnorm::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AtomicFile, WritesAndReplaces) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  addnorm::io::write_file_atomic(path, std::string_view("first"));
  EXPECT_EQ(slurp(path), "first");
  addnorm::io::write_file_atomic(path, std::string_view("second, longer"));
  EXPECT_EQ(slurp(path), "second, longer");
  addnorm::io::write_file_atomic(path, std::string_view(""));
  EXPECT_EQ(slurp(path), "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.txt"});  // no temporary left
}

TEST(AtomicFile, NewFileHasUmaskPermissions) {
  TempDir dir;
  const std::string path = dir.file("perm.bin");
  const mode_t old = ::umask(022);
  addnorm::io::write_file_atomic(path, std::string_view("x"));
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, MissingFolderFailsAndWritesNothing) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/out.txt");
  const std::string msg = message_of([&] { addnorm::io::write_file_atomic(path, std::string_view("x")); });
  EXPECT_NE(msg.find("[write_file_atomic] " + path + ": cannot create a temporary file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, RenameOntoAFolderFailsAndRemovesTheTemporary) {
  TempDir dir;
  std::filesystem::create_directory(dir.path() / "taken");
  std::filesystem::create_directory(dir.path() / "taken" / "inside");  // a non-empty folder
  const std::string path = dir.file("taken");
  const std::string msg = message_of([&] { addnorm::io::write_file_atomic(path, std::string_view("x")); });
  EXPECT_NE(msg.find("cannot rename the temporary file over it"), std::string::npos) << msg;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
}

TEST(ReadFile, Errors) {
  TempDir dir;
  const std::string missing = dir.file("missing.csv");
  EXPECT_EQ(message_of([&] { addnorm::io::read_file(missing); }),
            "[read_file] " + missing + ": cannot open: No such file or directory");
  EXPECT_EQ(message_of([&] { addnorm::io::read_file(dir.path().string()); }),
            "[read_file] " + dir.path().string() + ": is a directory");
  if (::geteuid() != 0) {  // root reads anything
    const std::string locked = dir.file("locked.csv");
    std::ofstream(locked) << "1,2\n";
    ::chmod(locked.c_str(), 0);
    EXPECT_EQ(message_of([&] { addnorm::io::read_file(locked); }),
              "[read_file] " + locked + ": cannot open: Permission denied");
  }
}

TEST(ReadFile, ReadsLargeFilesWhole) {
  TempDir dir;
  std::string big(300000, 'a');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  addnorm::io::write_file_atomic(dir.file("big"), big);
  EXPECT_EQ(slurp(dir.file("big")), big);
}

}  // namespace
