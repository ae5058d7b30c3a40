// Whole-file reading, and writing that never leaves a partial file behind.
//
// write_file_atomic writes the bytes to a temporary file in the same folder as `path`
// (path + ".tmp-XXXXXX", created exclusively), flushes it to disk, then renames it over `path`.
// Readers see either the old file or the complete new one; on any failure the temporary file is
// removed and `path` is left as it was. Errors throw addnorm::Error naming the function, the
// file and the system's reason, e.g. "[read_file] x.npy: cannot open: No such file or directory".
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace addnorm::io {

// Reads a whole file (a regular file, a pipe or a device such as /dev/stdin).
std::vector<std::byte> read_file(const std::string& path);

// Writes bytes to path atomically (see above).
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace addnorm::io
