#include "train/checkpoints/class_to_idx.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/io/atomic_file.h"
#include "kernels/error.h"

namespace dpcore::train {

std::string class_to_idx_json(const std::vector<std::string>& names) {
  // ordered_json keeps the index order; json would sort the keys, which is the same order
  // for ImageFolder's sorted names but not for names given otherwise.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (size_t i = 0; i < names.size(); ++i) j[names[i]] = i;
  return j.dump();
}

std::string class_to_idx_path(const std::string& weights_path) {
  return std::filesystem::path(weights_path).replace_extension(".class_to_idx.json").string();
}

void save_class_to_idx(const std::vector<std::string>& names, const std::string& path) {
  const std::string text = class_to_idx_json(names) + "\n";
  io::AtomicFileWriter file(path, "save class_to_idx");
  file.write(text.data(), text.size());
  file.commit();
}

std::vector<std::string> load_class_to_idx(const std::string& path) {
  std::ifstream file(path);
  DPCORE_CHECK(file.good(), path, ": cannot read the class names (written beside the weights by train --save)");
  const nlohmann::json j = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  DPCORE_CHECK(j.is_object() && !j.empty(), path, ": not a JSON object of class names to indices");
  std::vector<std::string> names(j.size());
  std::vector<char> seen(j.size(), 0);
  for (const auto& [name, index] : j.items()) {
    DPCORE_CHECK(index.is_number_unsigned() && index.get<size_t>() < j.size() && !seen[index.get<size_t>()], path,
                 ": class \"", name, "\" has index ", index.dump(), "; expected each of 0..", j.size() - 1, " once");
    names[index.get<size_t>()] = name;
    seen[index.get<size_t>()] = 1;
  }
  return names;
}

}  // namespace dpcore::train
