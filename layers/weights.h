// A model's parameters in and out of safetensors files, under PyTorch's state_dict names,
// so weights move between dpcore and PyTorch unchanged.
#pragma once

#include <map>
#include <string>

#include "engine/io/safetensors.h"
#include "layers/model.h"

namespace dpcore::layers {

// Writes every parameter (float32 or float64, as the model holds them), atomically.
void save_weights(const Model& model, const std::string& path, const std::map<std::string, std::string>& metadata = {});

// Loads parameters strictly, as load_state_dict(strict=True): every model parameter must be
// present with its exact shape, and the file may hold no other tensors. Float32 and
// float64 files both load into either precision.
void load_weights(Model& model, const std::string& path);
// The same from an already-parsed file; tensors are looked up as prefix + name, and only
// those are checked (other tensors in the file are allowed).
void load_weights(Model& model, const io::SafetensorsFile& file, const std::string& prefix);

}  // namespace dpcore::layers
