#include "engine/data/text/read_utf8_file.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/data/text/utf8.h"
#include "kernels/error.h"

namespace dpcore::data::text {

void check_utf8(const std::string& bytes, const std::string& path) {
  const size_t bad = invalid_utf8_offset(bytes);
  if (bad == std::string::npos) return;
  const long line = 1 + std::count(bytes.begin(), bytes.begin() + long(bad), '\n');
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", unsigned(static_cast<unsigned char>(bytes[bad])));
  fail(path, " line ", line, ": invalid UTF-8 (byte ", byte, ")");
}

std::string read_utf8_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DPCORE_CHECK(in.good(), path, ": cannot open");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  DPCORE_CHECK(!in.bad(), path, ": read error");
  std::string text = bytes.str();
  check_utf8(text, path);
  return text;
}

}  // namespace dpcore::data::text
