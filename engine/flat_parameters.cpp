#include "engine/flat_parameters.h"

namespace dpcore {

std::vector<FlatEntry> flat_layout(const std::vector<std::pair<std::string, Shape>>& named, const char* what,
                                   int64_t& total) {
  std::vector<FlatEntry> entries;
  total = 0;
  for (const auto& [name, shape] : named) {
    for (const FlatEntry& e : entries) DPCORE_CHECK(e.name != name, what, ": the name '", name, "' is used twice");
    FlatEntry e{name, shape, total, shape_numel(shape)};
    total += (e.numel + kFlatAlignment - 1) / kFlatAlignment * kFlatAlignment;
    entries.push_back(std::move(e));
  }
  return entries;
}

FlatParameters::FlatParameters(const std::vector<ParamSpec>& specs, DType dtype, Device device) {
  std::vector<std::pair<std::string, Shape>> named;
  for (const ParamSpec& spec : specs) named.emplace_back(spec.name, spec.shape);
  std::vector<FlatEntry> layout = flat_layout(named, "parameters", total_);
  for (size_t i = 0; i < specs.size(); ++i) entries_.push_back(Entry{std::move(layout[i]), specs[i].weight_decay});
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
  return find_flat_entry(entries_, name, "parameters");
}

void FlatParameters::zero_grad() { grads_.zero_(); }

}  // namespace dpcore
