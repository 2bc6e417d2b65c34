// The text forms of the --data flag and loading one split of them:
//   fortunes-lang[:DIR]    language identification over the fortune databases (fortunes.h)
//   fortunes-topic[:DIR]   ten English topics of the same
//   text:FILE.tsv | text:DIR   people's own labelled text (text_files.h)
#pragma once

#include <string>
#include <vector>

#include "engine/data/text/text_dataset.h"

namespace dpcore::data::text {

// Whether `value` names a text dataset (its kind is one of the above).
bool is_text_data(const std::string& value);

// Every labelled text `value` names, both splits' (read once; make_text_dataset splits them).
// Throws dpcore::Error quoting the flag value when it is not one of the forms above.
std::vector<LabelledText> read_labelled_texts(const std::string& value);

// One split of read_labelled_texts(value), named "VALUE train" or "VALUE test".
TextDataset load_text_split(const std::string& value, Split split);

}  // namespace dpcore::data::text
