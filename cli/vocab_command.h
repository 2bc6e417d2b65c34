// `dpcore vocab --data D --vocab-size N --out vocab.txt`: builds a WordPiece vocabulary from
// the training split of a text dataset (engine/data/text/vocab_builder.h) and writes it in
// Hugging Face's vocab.txt format, atomically.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace dpcore::cli {

struct VocabOptions {
  std::string data = "fortunes-lang";
  int64_t vocab_size = 0;
  std::string out;
};

// Prints what it read and wrote to `log`; dpcore::Error on bad data or a size too small.
void write_vocab(const VocabOptions& options, std::ostream& log);

}  // namespace dpcore::cli
