// addnorm::Error and the helpers that build its messages.
//
// Every public entry point checks its arguments and throws addnorm::Error with a message that
// starts with the function's name in brackets, e.g. "[layer_norm_forward] gamma has 511 elements,
// expected 512".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace addnorm {

class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Throws Error("[fn] " + parts...). Parts are streamed with operator<<.
template <class... Parts>
[[noreturn]] void fail(std::string_view fn, Parts&&... parts) {
  std::ostringstream os;
  os.precision(17);
  os << '[' << fn << "] ";
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

// Throws Error("[fn] " + parts...) when cond is false.
template <class... Parts>
void require(bool cond, std::string_view fn, Parts&&... parts) {
  if (!cond) fail(fn, std::forward<Parts>(parts)...);
}

}  // namespace addnorm
