// The fortune databases of Debian's fortunes packages (fortunes, fortunes-de, -es, -it, -pl,
// -ru, -cs, -br, -eo, -bg, -ga) under /usr/share/games/fortunes: entries separated by lines
// holding "%". Every file these packages ship is UTF-8 (docs/text.md says how that was
// checked); a file that is not is an error naming it. Two labelled sets:
//   fortunes-lang    the language of every entry (folder -> language, docs/text.md)
//   fortunes-topic   ten English files as topics (computers, definitions, law, ...)
#pragma once

#include <string>
#include <vector>

#include "engine/data/text/text_dataset.h"

namespace dpcore::data::text {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The entries of one fortune file: the lines between "%" lines, each without trailing
// spaces, tabs or carriage return, without blank lines at either end; empty entries dropped.
std::vector<std::string> fortune_entries(const std::string& text);

// The file to read for fortune file `path`: "PATH.u8" when it exists and is not empty,
// else `path` itself (the Polish .u8 files are empty, their plain files UTF-8).
std::string fortune_file_to_read(const std::string& path);

std::vector<LabelledText> read_fortunes_lang(const std::string& dir);
std::vector<LabelledText> read_fortunes_topic(const std::string& dir);

}  // namespace dpcore::data::text
