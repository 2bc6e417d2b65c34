#include "engine/io/safetensors.h"

namespace dpcore::io {

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  fail("safetensors: unknown DType ", int(dtype));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const TensorRecord& t : tensors_) out.push_back(t.name);
  return out;
}

const TensorRecord* SafetensorsFile::find(const std::string& name) const {
  for (const TensorRecord& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorRecord& SafetensorsFile::at(const std::string& name) const {
  const TensorRecord* t = find(name);
  if (!t) fail(source_, ": no tensor named '", name, "' (the file holds ", tensors_.size(), " tensors)");
  return *t;
}

}  // namespace dpcore::io
