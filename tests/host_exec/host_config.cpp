// The settings of host_config.h, read from the environment once.
#include "host_exec/host_config.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace host_exec {

int multiprocessors() {
  static const int count = [] {
    const char* text = std::getenv("DPCORE_HOST_SMS");
    if (!text) return 132;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value > 1024)
      throw std::runtime_error("DPCORE_HOST_SMS = \"" + std::string(text) + "\": expected an SM count from 1 to 1024");
    return int(value);
  }();
  return count;
}

}  // namespace host_exec
