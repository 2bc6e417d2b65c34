// Model state that is not a parameter (PyTorch's buffers: batch norm's running mean and
// variance and its batch count) in ONE flat buffer of its own, laid out like the parameters
// (engine/flat_parameters.h) and with the same layout on every replica:
//   * no gradient, never touched by the optimizer or weight decay;
//   * replicating or broadcasting all of it is one copy or one collective;
//   * saved beside the parameters under PyTorch's state_dict names.
// Counters (num_batches_tracked) are kept in the buffer's floating-point type, which counts
// exactly up to 2^24 (float32) or 2^53 (float64) batches, and are int64 in files, as in
// PyTorch.
#pragma once

#include <string>
#include <vector>

#include "engine/flat_parameters.h"

namespace dpcore {

struct BufferSpec {
  std::string name;      // PyTorch state_dict name, e.g. "bn1.running_mean"
  Shape shape;
  double initial = 0;    // every element starts at this value
  bool counter = false;  // an integer count: int64 in files
};

class FlatBuffers {
 public:
  struct Entry : FlatEntry {
    double initial = 0;
    bool counter = false;
  };

  FlatBuffers(const std::vector<BufferSpec>& specs, DType dtype, Device device);

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(const std::string& name) const;  // throws naming the buffer
  int64_t total() const { return total_; }
  DType dtype() const { return values_.dtype(); }
  Device device() const { return values_.device(); }
  bool empty() const { return entries_.empty(); }

  // The flat buffer itself, [total()] (an empty tensor for a model without buffers).
  const Tensor& values() const { return values_; }
  // Buffer i: a view into values().
  const Tensor& buffer(size_t i) const { return buffers_[i]; }

  // Every buffer back to its initial value (PyTorch's reset_running_stats).
  void reset();

 private:
  std::vector<Entry> entries_;
  int64_t total_ = 0;
  Tensor values_;
  std::vector<Tensor> buffers_;
};

}  // namespace dpcore
