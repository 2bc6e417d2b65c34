#include "engine/flat_buffers.h"

namespace dpcore {

FlatBuffers::FlatBuffers(const std::vector<BufferSpec>& specs, DType dtype, Device device) {
  std::vector<std::pair<std::string, Shape>> named;
  for (const BufferSpec& spec : specs) named.emplace_back(spec.name, spec.shape);
  std::vector<FlatEntry> layout = flat_layout(named, "buffers", total_);
  for (size_t i = 0; i < specs.size(); ++i) {
    Entry e;
    static_cast<FlatEntry&>(e) = layout[i];
    e.initial = specs[i].initial, e.counter = specs[i].counter;
    entries_.push_back(std::move(e));
  }
  values_ = Tensor::zeros({total_}, dtype, device);
  const size_t esize = dtype_size(dtype);
  for (const Entry& e : entries_) buffers_.push_back(Tensor::view_of(values_.storage(), size_t(e.offset) * esize, e.shape, dtype));
  reset();
}

const FlatBuffers::Entry& FlatBuffers::entry(const std::string& name) const {
  return find_flat_entry(entries_, name, "buffers");
}

void FlatBuffers::reset() {
  for (size_t i = 0; i < entries_.size(); ++i) buffers_[i].fill_(entries_[i].initial);
}

}  // namespace dpcore
