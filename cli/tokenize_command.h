// `dpcore tokenize --data D [--vocab V] [--max-len L] [--truncate] --out FILE.safetensors`:
// writes a text dataset's two splits as the token ids `dpcore train` feeds its model (the
// same reading, split, tokenizer and truncation: engine/data/spec.h's load_data), so that
// another framework can train on exactly dpcore's input (bench/compare_text.py does).
//
// The file, written atomically, holds for each split S in {train, test}:
//   S.ids      int64 [total tokens]  every text's ids, [CLS] ... [SEP], one after another
//   S.offsets  int64 [texts + 1]     text i is ids[offsets[i] : offsets[i + 1]]
//   S.labels   int64 [texts]         class indices
// and in its metadata: "classes" (a JSON array, index order), "pad_id", "vocab_size",
// "vocab" (the file read), "data" and "max_len".
#pragma once

#include <ostream>
#include <string>

#include "engine/data/spec.h"

namespace dpcore::cli {

struct TokenizeOptions {
  std::string data = "fortunes-lang";
  data::TextOptions text;
  std::string out;
};

// Prints what it read and wrote to `log`; dpcore::Error on data that is not text or that
// train would refuse (a text too long without --truncate, and so on).
void write_tokens(const TokenizeOptions& options, std::ostream& log);

}  // namespace dpcore::cli
