// The text forms of the --data flag and loading one split of them:
//   fortunes-lang[:DIR]    language identification over the fortune databases (fortunes.h)
//   fortunes-topic[:DIR]   ten English topics of the same
//   text:FILE.tsv | text:DIR   people's own labelled text (text_files.h)
#pragma once

#include <string>

#include "engine/data/text/text_dataset.h"

namespace dpcore::data::text {

// Whether `value` names a text dataset (its kind is one of the above).
bool is_text_data(const std::string& value);

// Throws dpcore::Error quoting the flag value when it is not one of the forms above.
TextDataset load_text_split(const std::string& value, Split split);

}  // namespace dpcore::data::text
