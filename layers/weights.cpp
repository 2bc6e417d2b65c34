#include "layers/weights.h"

#include <vector>

namespace dpcore::layers {

void save_weights(const Model& model, const std::string& path, const std::map<std::string, std::string>& metadata) {
  const FlatParameters& params = model.parameters();
  Tensor host = params.values().to(Device::cpu());
  size_t esize = dtype_size(host.dtype());
  std::vector<io::TensorView> views;
  for (const auto& e : params.entries()) {
    views.push_back({e.name, host.dtype(), e.shape, static_cast<const char*>(host.raw_data()) + size_t(e.offset) * esize,
                     size_t(e.numel) * esize});
  }
  io::save_safetensors(path, views, metadata);
}

void load_weights(Model& model, const io::SafetensorsFile& file, const std::string& prefix) {
  FlatParameters& params = model.parameters();
  // Assemble the whole flat buffer on the host (padding stays zero), then one copy.
  std::vector<double> host(size_t(params.total()), 0.0);
  for (const auto& e : params.entries()) {
    const io::TensorRecord* t = file.find(prefix + e.name);
    DPCORE_CHECK(t != nullptr, file.source(), ": no tensor '", prefix + e.name, "' for the model's parameter ", e.name);
    DPCORE_CHECK(t->shape == e.shape, file.source(), ": tensor '", t->name, "' has shape ", shape_str(t->shape),
                 " but the model's ", e.name, " is ", shape_str(e.shape));
    if (t->dtype == DType::Float32) {
      std::copy(t->values<float>(), t->values<float>() + e.numel, host.begin() + e.offset);
    } else if (t->dtype == DType::Float64) {
      std::copy(t->values<double>(), t->values<double>() + e.numel, host.begin() + e.offset);
    } else {
      fail(file.source(), ": tensor '", t->name, "' is ", dtype_name(t->dtype), "; parameters must be F32 or F64");
    }
  }
  Tensor values = params.values();
  if (values.dtype() == DType::Float64) {
    values.copy_(Tensor::from_vector(host, values.shape()));
  } else {
    values.copy_(Tensor::from_vector(std::vector<float>(host.begin(), host.end()), values.shape()));
  }
}

void load_weights(Model& model, const std::string& path) {
  io::SafetensorsFile file = io::load_safetensors(path);
  for (const auto& t : file.tensors()) {
    bool known = false;
    for (const auto& e : model.parameters().entries()) known = known || e.name == t.name;
    DPCORE_CHECK(known, path, ": unexpected tensor '", t.name, "' (not a parameter of this model)");
  }
  load_weights(model, file, "");
}

}  // namespace dpcore::layers
