#include "engine/data/text/fortunes.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "engine/data/text/read_utf8_file.h"
#include "kernels/error.h"

namespace dpcore::data::text {

namespace fs = std::filesystem;

namespace {

// Where one class's entries are: a folder's fortune files (its subfolders too, but for the
// top folder, whose subfolders are the other languages) or one file.
struct Source {
  const char* label;
  const char* path;  // relative to the fortunes folder
  const char* package;
  bool folder;
};

// Symbolic links are skipped inside folders: in these packages they are aliases (cz -> cs,
// the top folder's links to it/, the .u8 links to the plain files).
const Source kLanguages[] = {
    {"en", ".", "fortunes", true},       {"pt", "brasil", "fortunes-br", false},
    {"de", "de", "fortunes-de", true},   {"es", "es", "fortunes-es", true},
    {"it", "it", "fortunes-it", true},   {"pl", "pl", "fortunes-pl", true},
    {"ru", "ru", "fortunes-ru", true},   {"cs", "cs", "fortunes-cs", true},
    {"sk", "cs/klasik-sk", "fortunes-cs", false},  // Slovak, linked from sk/ by fortunes-cs
    {"eo", "eo", "fortunes-eo", true},   {"bg", "bg", "fortunes-bg", true},
    {"ga", "ga", "fortunes-ga", true},
};

const char* const kTopics[] = {"computers", "definitions", "law",         "love",   "medicine",
                               "politics",  "science",     "songs-poems", "sports", "startrek"};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string right_trimmed(const std::string& line) {
  size_t end = line.size();
  while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\t' || line[end - 1] == '\r')) --end;
  return line.substr(0, end);
}

void check_exists(const fs::path& path, const char* package) {
  DPCORE_CHECK(fs::exists(path), path.string(), " not found: install Debian's ", package,
               " (scripts/install-deps.sh)");
}

// The fortune files of a folder source: regular files, not strfile's .dat indexes, not a
// file's .u8 variant (fortune_file_to_read picks it), not one that another source claims.
std::vector<std::string> folder_files(const fs::path& dir, bool recursive, const std::set<fs::path>& claimed) {
  std::vector<std::string> files;
  auto consider = [&](const fs::directory_entry& entry) {
    if (entry.is_symlink() || !entry.is_regular_file()) return;
    const std::string path = entry.path().string();
    if (ends_with(path, ".dat") || claimed.count(entry.path().lexically_normal())) return;
    if (ends_with(path, ".u8") && fs::exists(path.substr(0, path.size() - 3))) return;
    files.push_back(path);
  };
  if (recursive) {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) consider(entry);
  } else {
    for (const auto& entry : fs::directory_iterator(dir)) consider(entry);
  }
  std::sort(files.begin(), files.end());
  return files;
}

void append_file(std::vector<LabelledText>& out, const std::string& label, const std::string& path) {
  const std::string file = fortune_file_to_read(path);
  int64_t number = 0;
  for (std::string& entry : fortune_entries(read_utf8_file(file)))
    out.push_back({label, std::move(entry), file + " entry " + std::to_string(++number)});
}

}  // namespace

std::vector<std::string> fortune_entries(const std::string& text) {
  std::vector<std::string> entries;
  std::vector<std::string> lines;
  auto finish_entry = [&] {
    size_t first = 0, last = lines.size();
    while (first < last && lines[first].empty()) ++first;
    while (last > first && lines[last - 1].empty()) --last;
    if (first < last) {
      std::string entry = lines[first];
      for (size_t i = first + 1; i < last; ++i) entry += "\n" + lines[i];
      entries.push_back(std::move(entry));
    }
    lines.clear();
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = right_trimmed(text.substr(start, end - start));
    if (line == "%")
      finish_entry();
    else
      lines.push_back(std::move(line));
    start = end + 1;
  }
  finish_entry();
  return entries;
}

std::string fortune_file_to_read(const std::string& path) {
  const std::string u8 = path + ".u8";
  std::error_code ec;
  if (fs::is_regular_file(u8, ec) && fs::file_size(u8, ec) > 0 && !ec) return u8;
  return path;
}

std::vector<LabelledText> read_fortunes_lang(const std::string& dir) {
  check_exists(dir, "fortunes");
  std::set<fs::path> claimed;
  for (const Source& s : kLanguages)
    if (!s.folder) claimed.insert((fs::path(dir) / s.path).lexically_normal());
  std::vector<LabelledText> out;
  for (const Source& s : kLanguages) {
    const fs::path path = fs::path(dir) / s.path;
    check_exists(path, s.package);
    if (!s.folder) {
      append_file(out, s.label, path.string());
      continue;
    }
    const bool top = std::string(s.path) == ".";
    const std::vector<std::string> files = folder_files(path, !top, claimed);
    DPCORE_CHECK(!files.empty(), path.string(), ": no fortune files (Debian's ", s.package, ")");
    for (const std::string& file : files) append_file(out, s.label, file);
  }
  return out;
}

std::vector<LabelledText> read_fortunes_topic(const std::string& dir) {
  std::vector<LabelledText> out;
  for (const char* topic : kTopics) {
    const fs::path path = fs::path(dir) / topic;
    check_exists(path, "fortunes");
    append_file(out, topic, path.string());
  }
  return out;
}

}  // namespace dpcore::data::text
