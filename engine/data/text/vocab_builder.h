// Builds a WordPiece vocabulary from training texts, deterministically (docs/text.md):
//   1. basic-tokenize every text (basic_tokenizer.h) and count the words;
//   2. split each word into its first character and "##"-characters after it: these units,
//      sorted by their UTF-8 bytes, follow the special tokens ([PAD] [UNK] [CLS] [SEP] [MASK]);
//   3. repeatedly merge the adjacent pair of units with the highest count over all words
//      (word counts included), ties to the pair whose (left, right) texts sort first; the merged
//      unit (left + right without its "##") is the next token unless already one;
//   until the vocabulary has `vocab_size` tokens or no pair is left. These are the merges of
//   Hugging Face's WordPieceTrainer (a BPE trainer with the "##" continuation prefix).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/text/vocab.h"

namespace dpcore::data::text {

struct VocabSummary {
  int64_t texts = 0, words = 0, distinct_words = 0, alphabet = 0, merges = 0;
};

// Throws dpcore::Error when vocab_size is smaller than the special tokens and the alphabet.
Vocab build_vocab(const std::vector<std::string>& texts, int64_t vocab_size, VocabSummary* summary = nullptr);

}  // namespace dpcore::data::text
