#include "support/test_support.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

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

namespace {
template <class T>
double scaled_difference_of(const T* got, const T* ref, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) {
    scale = std::max(scale, std::abs(double(ref[i])));
    worst = std::max(worst, std::abs(double(got[i]) - double(ref[i])));
  }
  return scale > 0 ? worst / scale : worst;
}
}  // namespace

double scaled_difference(const float* got, const float* ref, size_t n) { return scaled_difference_of(got, ref, n); }
double scaled_difference(const double* got, const double* ref, size_t n) { return scaled_difference_of(got, ref, n); }

TempDir::TempDir() {
  // mkdtemp replaces the XXXXXX with a unique name and creates the directory.
  std::string templ = (std::filesystem::temp_directory_path() / "dpcore-test-XXXXXX").string();
  const char* made = mkdtemp(templ.data());
  if (!made) throw std::runtime_error("TempDir: cannot create a directory from " + templ + ": " + std::strerror(errno));
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string source_dir() {
  const char* dir = std::getenv("DPCORE_SOURCE_DIR");
  return dir ? dir : "..";
}

bool python_can_import(const std::string& modules) {
  const int result =
      std::system((std::string(kTorchPython) + " -c 'import " + modules + "' >/dev/null 2>&1").c_str());
  return WIFEXITED(result) && WEXITSTATUS(result) == 0;
}

bool python_has_torch() { return python_can_import("torch"); }

ScriptResult run_python_script(const std::string& script, const std::string& args, const std::string& python) {
  const std::string cmd = python + " '" + source_dir() + "/" + script + "' " + args + " 2>&1";
  ScriptResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, got);
  const int result = pclose(pipe);
  r.status = WIFEXITED(result) ? WEXITSTATUS(result) : -1;
  return r;
}

}  // namespace dpcore::testing
