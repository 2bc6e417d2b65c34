#include "engine/data/text/basic_tokenizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "engine/data/text/utf8.h"
#include "kernels/error.h"

namespace dpcore::data::text {

namespace {

utf8proc_category_t category(char32_t cp) { return utf8proc_category(utf8proc_int32_t(cp)); }

bool is_control_category(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
         c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CN;
}

// BasicTokenizer's _is_whitespace and _is_control.
bool is_bert_whitespace(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || category(cp) == UTF8PROC_CATEGORY_ZS;
}
bool is_bert_control(char32_t cp) {
  return cp != '\t' && cp != '\n' && cp != '\r' && is_control_category(category(cp));
}

// Python's str.isspace: bidirectional class WS, B or S, or category Zs.
bool is_python_space(char32_t cp) {
  if (category(cp) == UTF8PROC_CATEGORY_ZS) return true;
  const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(cp));
  return p->bidi_class == UTF8PROC_BIDI_CLASS_WS || p->bidi_class == UTF8PROC_BIDI_CLASS_B ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

bool is_chinese_char(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
    return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// utf8proc_map's output (NFC, NFD) as code points.
std::u32string normalized(const std::u32string& cps, utf8proc_option_t options) {
  const std::string bytes = encode_utf8(cps);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data()),
                                          utf8proc_ssize_t(bytes.size()), &out, options);
  DPCORE_CHECK(n >= 0, "basic_tokenize: utf8proc: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return decode_utf8(std::string_view(reinterpret_cast<const char*>(out), size_t(n)));
}

// Cased and case-ignorable (Unicode's definitions, from the categories utf8proc has): what
// Python's final-sigma rule looks at.
bool is_cased(char32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         utf8proc_tolower(utf8proc_int32_t(cp)) != utf8proc_int32_t(cp) ||
         utf8proc_toupper(utf8proc_int32_t(cp)) != utf8proc_int32_t(cp);
}
bool is_case_ignorable(char32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK || cp == '\'' || cp == '.' || cp == ':' ||
         cp == 0x00B7 || cp == 0x2018 || cp == 0x2019 || cp == 0x2024 || cp == 0x2027 || cp == 0xFE13 ||
         cp == 0xFE52 || cp == 0xFE55 || cp == 0xFF07 || cp == 0xFF0E || cp == 0xFF1A || cp == 0x00AD;
}

// Python's str.lower of one word: U+0130 to "i" + U+0307, capital sigma to final sigma
// after a cased letter and before none (case-ignorables skipped), else the simple mapping.
std::u32string lower(const std::u32string& word) {
  std::u32string out;
  out.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const char32_t cp = word[i];
    if (cp == 0x0130) {
      out += U"i\u0307";
    } else if (cp == 0x03A3) {
      size_t before = i, after = i + 1;
      while (before > 0 && is_case_ignorable(word[before - 1])) --before;
      while (after < word.size() && is_case_ignorable(word[after])) ++after;
      const bool final = before > 0 && is_cased(word[before - 1]) && !(after < word.size() && is_cased(word[after]));
      out += final ? char32_t(0x03C2) : char32_t(0x03C3);
    } else {
      out += char32_t(utf8proc_tolower(utf8proc_int32_t(cp)));
    }
  }
  return out;
}

std::u32string without_accents(const std::u32string& word) {
  std::u32string out;
  for (char32_t cp : normalized(word, UTF8PROC_DECOMPOSE))
    if (category(cp) != UTF8PROC_CATEGORY_MN) out += cp;
  return out;
}

template <class Split>
std::vector<std::u32string> split_at(const std::u32string& text, Split&& is_space) {
  std::vector<std::u32string> words(1);
  for (char32_t cp : text) {
    if (is_space(cp)) {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += cp;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

std::vector<std::u32string> basic_tokenize(std::string_view text) {
  const size_t bad = invalid_utf8_offset(text);
  DPCORE_CHECK(bad == std::string_view::npos, "tokenizer: invalid UTF-8 at byte ", bad, " of the text");
  std::u32string cleaned;
  for (char32_t cp : decode_utf8(text)) {
    if (cp == 0 || cp == 0xFFFD || is_bert_control(cp)) continue;
    if (is_bert_whitespace(cp)) {
      cleaned += ' ';
    } else if (is_chinese_char(cp)) {
      cleaned += U' ';
      cleaned += cp;
      cleaned += U' ';
    } else {
      cleaned += cp;
    }
  }
  std::vector<std::u32string> tokens;
  for (const std::u32string& word : split_at(normalized(cleaned, UTF8PROC_COMPOSE), is_python_space)) {
    bool after_punctuation = true;
    for (char32_t cp : without_accents(lower(word))) {
      if (is_bert_punctuation(cp)) {
        tokens.emplace_back(1, cp);
        after_punctuation = true;
      } else {
        if (after_punctuation) tokens.emplace_back();
        tokens.back() += cp;
        after_punctuation = false;
      }
    }
  }
  return tokens;
}

}  // namespace dpcore::data::text
