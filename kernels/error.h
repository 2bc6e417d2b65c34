// One exception type for every user-facing failure. Messages name the operation and the
// offending values (shapes, files, flags) so that the user can fix the input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpcore {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Builds a message from any streamable pieces: fail("conv2d: input ", shape, " ...").
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

#define DPCORE_CHECK(cond, ...)   \
  do {                            \
    if (!(cond)) ::dpcore::fail(__VA_ARGS__); \
  } while (0)

// "[2, 3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace dpcore
