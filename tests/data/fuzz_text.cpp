// libFuzzer target: UTF-8, fortune entries and the WordPiece tokenizer on arbitrary bytes.
// Valid UTF-8 must round-trip and tokenize into pieces of the vocabulary, within max_len
// when truncated; invalid UTF-8 must be rejected with a dpcore::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/data/text/fortunes.h"
#include "engine/data/text/utf8.h"
#include "engine/data/text/wordpiece.h"
#include "kernels/error.h"

using namespace dpcore::data::text;

static const WordPieceTokenizer& tokenizer() {
  static const WordPieceTokenizer tok(Vocab({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "b", "##b", "ab",
                                             "\xC3\xA9", "##\xC3\xA9", ",", "\xE6\x97\xA5"},
                                            "fuzz"));
  return tok;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (invalid_utf8_offset(bytes) != std::string::npos) {
    try {
      tokenizer().tokenize(bytes);
    } catch (const dpcore::Error&) {
      return 0;  // rejected with a message: what invalid UTF-8 should get
    }
    std::abort();
  }
  if (encode_utf8(decode_utf8(bytes)) != bytes) std::abort();
  for (const std::string& entry : fortune_entries(bytes))
    if (entry.empty() || entry == "%") std::abort();
  for (const std::string& piece : tokenizer().tokenize(bytes))
    if (tokenizer().vocab().id_of(piece) < 0) std::abort();
  const std::vector<int64_t> ids = tokenizer().encode(bytes, 16, true);
  if (ids.size() < 2 || ids.size() > 16 || ids.front() != 2 || ids.back() != 3) std::abort();
  return 0;
}
