// People's own labelled text, UTF-8:
//   FILE.tsv   one text per line, "label<TAB>text" (the text is what follows the first tab;
//              empty lines are skipped)
//   DIR        one folder per class, sorted, each text a .txt file in it or below it (as
//              torchvision's ImageFolder)
// Both splits come from the same texts by make_text_dataset's hash (10% test).
#pragma once

#include <string>
#include <vector>

#include "engine/data/text/text_dataset.h"

namespace dpcore::data::text {

// Errors name the file and line: invalid UTF-8, a line without a tab, an empty label or text.
std::vector<LabelledText> read_text_tsv(const std::string& path);
// Errors name the file: invalid UTF-8, an empty text; and a class folder with no .txt file.
std::vector<LabelledText> read_text_dir(const std::string& dir);

}  // namespace dpcore::data::text
