// A whole text file that must be UTF-8, with the error naming the file, line and byte when it
// is not (or cannot be read).
#pragma once

#include <string>

namespace dpcore::data::text {

std::string read_utf8_file(const std::string& path);

// Throws "PATH line N: invalid UTF-8 (byte 0xXX)" unless `bytes`, read from `path`, is UTF-8.
void check_utf8(const std::string& bytes, const std::string& path);

}  // namespace dpcore::data::text
