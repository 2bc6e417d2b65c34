// An image folder's classes as torchvision's class_to_idx ({"cat": 0, "dog": 1}): printed at
// the start of training and written beside the saved weights, so that a prediction's index
// can be named.
#pragma once

#include <string>
#include <vector>

namespace dpcore::train {

// {"cat": 0, "dog": 1}: names[i] has index i.
std::string class_to_idx_json(const std::vector<std::string>& names);

// Where the classes of weights saved at `weights_path` go: "model.safetensors" ->
// "model.class_to_idx.json" (the extension replaced, or appended when there is none).
std::string class_to_idx_path(const std::string& weights_path);

// Writes class_to_idx_json(names) to `path` atomically (engine/io/atomic_file.h).
void save_class_to_idx(const std::vector<std::string>& names, const std::string& path);

// The class names in index order from a file save_class_to_idx wrote; dpcore::Error naming
// the file when it is missing, not JSON, or not an object of indices 0..N-1, each once.
std::vector<std::string> load_class_to_idx(const std::string& path);

}  // namespace dpcore::train
