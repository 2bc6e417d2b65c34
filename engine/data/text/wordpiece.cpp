#include "engine/data/text/wordpiece.h"

#include <algorithm>
#include <utility>

#include "engine/data/text/basic_tokenizer.h"
#include "engine/data/text/utf8.h"
#include "kernels/error.h"

namespace dpcore::data::text {

WordPieceTokenizer::WordPieceTokenizer(Vocab vocab)
    : vocab_(std::move(vocab)),
      cls_(vocab_.required_id(kClsToken)),
      sep_(vocab_.required_id(kSepToken)) {}

void WordPieceTokenizer::append_pieces(const std::u32string& word, std::vector<std::string>& out) const {
  if (word.size() > kMaxInputCharsPerWord) {
    out.push_back(kUnkToken);
    return;
  }
  const size_t first = out.size();
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    for (; end > start; --end) {
      std::string piece = (start > 0 ? "##" : "") + encode_utf8(word.substr(start, end - start));
      if (vocab_.id_of(piece) >= 0) {
        out.push_back(std::move(piece));
        break;
      }
    }
    if (end == start) {
      out.resize(first);
      out.push_back(kUnkToken);
      return;
    }
    start = end;
  }
}

// The earliest special token of the vocabulary at or after `from` in `text`, as Hugging
// Face's tokenizers find them in the raw text before normalising it.
static std::pair<size_t, std::string> next_special(std::string_view text, size_t from, const Vocab& vocab) {
  std::pair<size_t, std::string> best{std::string_view::npos, ""};
  for (const std::string& special : kSpecialTokens) {
    if (vocab.id_of(special) < 0) continue;
    const size_t at = text.find(special, from);
    if (at < best.first) best = {at, special};
  }
  return best;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for (size_t from = 0; from <= text.size();) {
    const auto [at, special] = next_special(text, from, vocab_);
    const size_t end = std::min(at, text.size());
    for (const std::u32string& word : basic_tokenize(text.substr(from, end - from))) append_pieces(word, pieces);
    if (at == std::string_view::npos) break;
    pieces.push_back(special);
    from = at + special.size();
  }
  return pieces;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text, int64_t max_len, bool truncate) const {
  DPCORE_CHECK(max_len >= 2, "encode: max_len ", max_len, " leaves no room for [CLS] and [SEP]");
  const std::vector<std::string> pieces = tokenize(text);
  const int64_t n = int64_t(pieces.size()) + 2;
  if (n > max_len && !truncate) {
    const std::u32string cps = decode_utf8(text);
    const std::string start = encode_utf8(cps.substr(0, 40));
    fail("a text of ", n, " tokens (with [CLS] and [SEP]) is longer than the maximum length ", max_len,
         " (truncate it with --truncate): \"", start, cps.size() > 40 ? "...\"" : "\"");
  }
  const size_t kept = size_t(std::min(n, max_len) - 2);
  std::vector<int64_t> ids;
  ids.reserve(kept + 2);
  ids.push_back(cls_);
  for (size_t i = 0; i < kept; ++i) ids.push_back(vocab_.id_of(pieces[i]));
  ids.push_back(sep_);
  return ids;
}

}  // namespace dpcore::data::text
