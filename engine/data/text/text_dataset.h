// Labelled texts on plain types, the text side's data::Dataset: the readers (fortunes.h,
// text_files.h) gather (class, text) pairs and make_text_dataset turns them into one split,
// duplicates removed and the train/test split decided by a hash of each text, so neither
// depends on the order in which files or lines were read (docs/text.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace dpcore::data::text {

struct TextDataset {
  std::string name;                      // e.g. "fortunes-lang train"; names the data in messages
  std::vector<std::string> texts;        // UTF-8
  std::vector<int64_t> labels;           // one per text, in [0, class_names.size())
  std::vector<std::string> class_names;  // sorted
  std::vector<std::string> sources;      // one per text, where it was read: "FILE line N", "FILE entry K", "FILE"
};

struct LabelledText {
  std::string label, text;
  std::string source;  // where the reader found it, for messages about the text
};

// What two texts must agree in to be duplicates: the text with every run of spaces, tabs,
// carriage returns and newlines made one space, and none at either end.
std::string duplicate_key(const std::string& text);

// 64-bit FNV-1a of the key's bytes; a text is in the test split when it is 0 mod 10.
uint64_t text_hash(const std::string& key);
bool in_test_split(const std::string& key);

// One split of `items`: one text per duplicate key (of duplicates with different labels,
// the one whose label sorts first), in the split's order of (hash, key); class names are
// every label of `items` (both splits), sorted.
TextDataset make_text_dataset(const std::string& name, const std::vector<LabelledText>& items, Split split);

// Throws dpcore::Error unless every label is a class and there is a label per text.
void check_text_dataset(const TextDataset& data);

// "9000 texts, 12 classes"
std::string describe(const TextDataset& data);

}  // namespace dpcore::data::text
