// A text dataset made token ids for training: every text tokenized once, at load, into
// [CLS] pieces [SEP] (wordpiece.h), labels the class indices (docs/text.md, "Training").
#pragma once

#include <cstdint>

#include "engine/data/dataset.h"
#include "engine/data/text/text_dataset.h"
#include "engine/data/text/wordpiece.h"

namespace dpcore::data::text {

// A data::Dataset of token-id samples (Dataset::tokens()): sample i the ids of text i, at
// most `max_len` of them; a longer text is an error naming its source (file and line) and
// length, unless `truncate`, which keeps its first max_len - 2 pieces. pad_id is [PAD]'s id
// (an error naming the vocabulary when it has none), vocab_size the vocabulary's; mask_id
// [MASK]'s (-1 when it has none), special_ids [CLS], [SEP] and [PAD]'s, vocab its file.
Dataset tokenize_dataset(const TextDataset& texts, const WordPieceTokenizer& tokenizer, int64_t max_len,
                         bool truncate);

}  // namespace dpcore::data::text
