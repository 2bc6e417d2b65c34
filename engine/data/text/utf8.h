// UTF-8 checked and turned into code points and back (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), for the text readers and the tokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dpcore::data::text {

// The offset of the first byte that does not start a valid UTF-8 sequence, or npos when
// all of `bytes` is valid UTF-8.
size_t invalid_utf8_offset(std::string_view bytes);

// The code points of valid UTF-8 (check with invalid_utf8_offset first: an invalid byte
// throws dpcore::Error).
std::u32string decode_utf8(std::string_view bytes);

void append_utf8(std::string& out, char32_t code_point);
std::string encode_utf8(std::u32string_view code_points);

}  // namespace dpcore::data::text
