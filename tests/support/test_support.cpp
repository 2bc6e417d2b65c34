#include "support/test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace dpcore::testing {

template <class T>
static double max_rel(const T* a, const T* b, size_t n, double floor) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double x = double(a[i]), y = double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), floor));
  }
  return worst;
}

double max_relative_error(const float* a, const float* b, size_t n, double floor) { return max_rel(a, b, n, floor); }
double max_relative_error(const double* a, const double* b, size_t n, double floor) { return max_rel(a, b, n, floor); }

TempDir::TempDir() {
  std::string templ = (std::filesystem::temp_directory_path() / "dpcore-test-XXXXXX").string();
  path_ = mkdtemp(templ.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string source_dir() {
  const char* dir = std::getenv("DPCORE_SOURCE_DIR");
  return dir ? dir : "..";
}

}  // namespace dpcore::testing
