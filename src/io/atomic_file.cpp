#include "addnorm/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "addnorm/core/error.hpp"

namespace addnorm::io {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes a file descriptor when it goes out of scope (unless released).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  // Closes now and returns 0 or the errno of a failed close.
  int close_now() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// The folder that holds path ("." for a bare file name).
std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Opens a new, exclusively created temporary file next to path; returns its descriptor and name.
int create_temp(const std::string& path, std::string& temp_name) {
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(::getpid()) ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  int last_err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string suffix(6, '0');
    for (char& ch : suffix) ch = kDigits[gen() % (sizeof(kDigits) - 1)];
    temp_name = path + ".tmp-" + suffix;
    // 0666 minus the umask, like any new file; O_EXCL: never reuse somebody else's file.
    const int fd = ::open(temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    last_err = errno;
    if (last_err != EEXIST) break;
  }
  fail("write_file_atomic", path, ": cannot create a temporary file in ", parent_dir(path), ": ", errno_text(last_err));
}

}  // namespace

std::vector<std::byte> read_file(const std::string& path) {
  constexpr const char* fn = "read_file";
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(fn, path, ": cannot open: ", errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode)) fail(fn, path, ": is a directory");
  std::vector<std::byte> bytes;
  if (S_ISREG(st.st_mode) && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  std::byte chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), chunk, sizeof(chunk));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(fn, path, ": cannot read: ", errno_text(errno));
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  return bytes;
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  constexpr const char* fn = "write_file_atomic";
  require(!path.empty(), fn, "empty file name");
  std::string temp_name;
  Fd fd(create_temp(path, temp_name));
  // From here on, any failure removes the temporary file.
  auto abandon = [&](const char* what, int err) {
    if (fd.get() >= 0) fd.close_now();
    ::unlink(temp_name.c_str());
    fail(fn, path, ": ", what, ": ", errno_text(err));
  };
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t put = ::write(fd.get(), p, left);
    if (put < 0) {
      if (errno == EINTR) continue;
      abandon("cannot write", errno);
    }
    p += put;
    left -= static_cast<size_t>(put);
  }
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS) abandon("cannot flush to disk", errno);
  if (const int err = fd.close_now(); err != 0) abandon("cannot close", err);
  if (::rename(temp_name.c_str(), path.c_str()) != 0) abandon("cannot rename the temporary file over it", errno);
  // Make the rename itself durable; a folder that cannot be synced is not an error.
  Fd dir(::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) (void)::fsync(dir.get());
}

void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace addnorm::io
