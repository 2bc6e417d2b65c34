// The small pieces of text the data flags are made of ("synthetic:1,28,28,10,500",
// "crop:4,flip"), parsed the same way for every flag.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpcore::data {

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}.
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char ch : s) {
    if (ch == ',')
      parts.emplace_back();
    else
      parts.back() += ch;
  }
  return parts;
}

// The whole text as an integer of at least 1 (no sign, no spaces), or nothing.
inline std::optional<int64_t> positive_integer(const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1) return std::nullopt;
  return v;
}

}  // namespace dpcore::data
