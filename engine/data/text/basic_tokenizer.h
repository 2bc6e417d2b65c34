// BERT's basic tokenization, uncased, as Hugging Face's BasicTokenizer (transformers,
// models/bert/tokenization_bert.py) with do_lower_case and strip_accents left on:
//   1. drop U+0000, U+FFFD and control characters (category C*, but tab, newline and CR),
//      make whitespace (space, tab, newline, CR, category Zs) a space;
//   2. put spaces around CJK ideographs (its _is_chinese_char ranges);
//   3. NFC, then split at whitespace (Python's str.split: also U+2028, U+2029 ...);
//   4. per word: lower case (Python's str.lower: full mappings and the final sigma), NFD,
//      drop nonspacing marks (Mn);
//   5. split punctuation into tokens of its own: ASCII 33-47, 58-64, 91-96, 123-126 and
//      category P*.
// Unicode's tables come from utf8proc (docs/text.md says where they and Python's differ).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dpcore::data::text {

// The tokens of UTF-8 `text` as code points (throws dpcore::Error on invalid UTF-8).
std::vector<std::u32string> basic_tokenize(std::string_view text);

}  // namespace dpcore::data::text
