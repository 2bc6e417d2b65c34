#include "train/checkpoints/class_to_idx.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/io/atomic_file.h"

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

}  // namespace dpcore::train
