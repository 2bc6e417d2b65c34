#include "engine/data/text/text_spec.h"

#include <filesystem>

#include "engine/data/text/fortunes.h"
#include "engine/data/text/text_files.h"
#include "kernels/error.h"

namespace dpcore::data::text {

static std::string kind_of(const std::string& value) { return value.substr(0, value.find(':')); }

bool is_text_data(const std::string& value) {
  const std::string kind = kind_of(value);
  return kind == "fortunes-lang" || kind == "fortunes-topic" || kind == "text";
}

std::vector<LabelledText> read_labelled_texts(const std::string& value) {
  const std::string kind = kind_of(value);
  const size_t colon = value.find(':');
  const std::string arg = colon == std::string::npos ? "" : value.substr(colon + 1);
  DPCORE_CHECK(colon == std::string::npos || !arg.empty(), "--data \"", value, "\": empty path after \"", kind, ":\"");
  if (kind == "fortunes-lang" || kind == "fortunes-topic") {
    const std::string dir = arg.empty() ? kFortunesDir : arg;
    return kind == "fortunes-lang" ? read_fortunes_lang(dir) : read_fortunes_topic(dir);
  }
  DPCORE_CHECK(kind == "text", "--data \"", value, "\": not a text dataset; expected fortunes-lang[:DIR], ",
               "fortunes-topic[:DIR], text:FILE.tsv or text:DIR");
  DPCORE_CHECK(!arg.empty(), "--data \"", value, "\": text needs a file or folder, text:FILE.tsv or text:DIR");
  DPCORE_CHECK(std::filesystem::exists(arg), "--data \"", value, "\": ", arg, " not found");
  return std::filesystem::is_directory(arg) ? read_text_dir(arg) : read_text_tsv(arg);
}

TextDataset load_text_split(const std::string& value, Split split) {
  return make_text_dataset(value + " " + split_name(split), read_labelled_texts(value), split);
}

}  // namespace dpcore::data::text
