#include "engine/flat_parameters.h"

namespace dpcore {

FlatParameters::FlatParameters(const std::vector<ParamSpec>& specs, DType dtype, Device device) {
  for (const ParamSpec& spec : specs) {
    for (const Entry& e : entries_) {
      DPCORE_CHECK(e.name != spec.name, "parameters: the name '", spec.name, "' is used twice");
    }
    Entry e{spec.name, spec.shape, total_, shape_numel(spec.shape)};
    total_ += (e.numel + kAlignment - 1) / kAlignment * kAlignment;
    entries_.push_back(std::move(e));
  }
  values_ = Tensor::zeros({total_}, dtype, device);
  grads_ = Tensor::zeros({total_}, dtype, device);
  size_t esize = dtype_size(dtype);
  for (const Entry& e : entries_) {
    Tensor p = Tensor::view_of(values_.storage(), size_t(e.offset) * esize, e.shape, dtype);
    p.set_requires_grad(true);
    p.set_grad(Tensor::view_of(grads_.storage(), size_t(e.offset) * esize, e.shape, dtype));
    params_.push_back(p);
  }
}

const FlatParameters::Entry& FlatParameters::entry(const std::string& name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const Entry& e : entries_) known += (known.empty() ? "" : ", ") + e.name;
  fail("parameters: no parameter named '", name, "' (the model has: ", known, ")");
}

void FlatParameters::zero_grad() { grads_.zero_(); }

}  // namespace dpcore
