// BERT's uncased WordPiece tokenizer: basic tokenization (basic_tokenizer.h), then per word
// the greedy longest-match-first split into vocabulary pieces, "##" marking a piece that
// continues a word; a word with a part no piece matches, or longer than 100 code points,
// is [UNK] as a whole (Hugging Face's WordpieceTokenizer). The special tokens of the
// vocabulary written in the text ("[MASK]") are tokens of their own, as in Hugging Face's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/data/text/vocab.h"

namespace dpcore::data::text {

inline constexpr size_t kMaxInputCharsPerWord = 100;

class WordPieceTokenizer {
 public:
  // Needs [CLS] and [SEP] in `vocab` (an error naming the one missing; a Vocab has [UNK]).
  explicit WordPieceTokenizer(Vocab vocab);

  std::vector<std::string> tokenize(std::string_view text) const;
  // [CLS], the pieces' ids, [SEP]. Longer than `max_len` (at least 2): an error, or with
  // `truncate` the first max_len - 2 pieces.
  std::vector<int64_t> encode(std::string_view text, int64_t max_len, bool truncate) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  void append_pieces(const std::u32string& word, std::vector<std::string>& out) const;

  Vocab vocab_;
  int64_t cls_, sep_;
};

}  // namespace dpcore::data::text
