#include "engine/data/text/text_files.h"

#include <algorithm>
#include <filesystem>

#include "engine/data/text/read_utf8_file.h"
#include "kernels/error.h"

namespace dpcore::data::text {

namespace fs = std::filesystem;

static bool only_layout_space(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

std::vector<LabelledText> read_text_tsv(const std::string& path) {
  const std::string bytes = read_utf8_file(path);
  std::vector<LabelledText> out;
  size_t start = 0;
  for (long line_no = 1; start < bytes.size(); ++line_no) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string line = bytes.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    DPCORE_CHECK(tab != std::string::npos, path, " line ", line_no, ": no tab (expected label<TAB>text)");
    LabelledText item{line.substr(0, tab), line.substr(tab + 1), path + " line " + std::to_string(line_no)};
    DPCORE_CHECK(!item.label.empty(), path, " line ", line_no, ": empty label before the tab");
    DPCORE_CHECK(!only_layout_space(item.text), path, " line ", line_no, ": empty text after the tab");
    out.push_back(std::move(item));
  }
  DPCORE_CHECK(!out.empty(), path, ": no texts (expected lines of label<TAB>text)");
  return out;
}

std::vector<LabelledText> read_text_dir(const std::string& dir) {
  std::vector<fs::path> classes;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory()) classes.push_back(entry.path());
  std::sort(classes.begin(), classes.end());
  DPCORE_CHECK(!classes.empty(), dir, ": no class folders (expected DIR/CLASS/*.txt)");
  std::vector<LabelledText> out;
  for (const fs::path& cls : classes) {
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(cls))
      if (entry.is_regular_file() && entry.path().extension() == ".txt") files.push_back(entry.path().string());
    DPCORE_CHECK(!files.empty(), cls.string(), ": no .txt files in class folder");
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      std::string text = read_utf8_file(file);
      DPCORE_CHECK(!only_layout_space(text), file, ": empty text");
      out.push_back({cls.filename().string(), std::move(text), file});
    }
  }
  return out;
}

}  // namespace dpcore::data::text
