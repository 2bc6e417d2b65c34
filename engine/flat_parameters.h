// All parameters of a model in ONE flat buffer, all gradients in a second buffer with the
// same layout (llm.c's params_memory / grads_memory). Layers hold views into them, so:
//   * zeroing every gradient is one fill,
//   * the optimizer is one fused pass over the whole buffer (engine/sgd.h),
//   * allreduce buckets are contiguous slices of the gradient buffer (comm/),
//   * replicating a model is one copy, saving is one walk over the entries.
// Each tensor starts at a multiple of 16 elements (64 bytes) so vectorised kernels can
// load it aligned; the padding between tensors is zero and stays zero.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace dpcore {

struct ParamSpec {
  std::string name;  // PyTorch state_dict name, e.g. "c1.weight"
  Shape shape;
  // Whether the optimizer's weight decay applies: off for biases and LayerNorm weights by
  // BERT's convention (PyTorch: a parameter group with weight_decay 0).
  bool weight_decay = true;
};

// Where one named tensor lives in a flat buffer.
struct FlatEntry {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffers
  int64_t numel = 0;
};
// The tensors `named` laid out one after another, each starting at a multiple of
// kFlatAlignment elements; `total` receives the buffer's length, padding included. Fails
// when a name is used twice (`what`: "parameters", "buffers").
constexpr int64_t kFlatAlignment = 16;
std::vector<FlatEntry> flat_layout(const std::vector<std::pair<std::string, Shape>>& named, const char* what,
                                   int64_t& total);
// The entry named `name`, or an error listing the names there are.
template <class E>
const E& find_flat_entry(const std::vector<E>& entries, const std::string& name, const char* what) {
  for (const E& e : entries) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const E& e : entries) known += (known.empty() ? "" : ", ") + e.name;
  fail(what, ": none named '", name, "' (the model has: ", known.empty() ? "none" : known, ")");
}

class FlatParameters {
 public:
  struct Entry : FlatEntry {
    bool weight_decay = true;  // as ParamSpec::weight_decay
  };
  static constexpr int64_t kAlignment = kFlatAlignment;

  FlatParameters(const std::vector<ParamSpec>& specs, DType dtype, Device device);

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(const std::string& name) const;  // throws naming the parameter
  int64_t total() const { return total_; }             // elements, padding included
  DType dtype() const { return values_.dtype(); }
  Device device() const { return values_.device(); }

  // The flat buffers themselves, each [total()].
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }

  // Parameter i as a leaf that requires grad, whose gradient buffer is its slice of grads().
  const Tensor& param(size_t i) const { return params_[i]; }
  const std::vector<Tensor>& params() const { return params_; }

  // One fill over the whole gradient buffer.
  void zero_grad();

 private:
  std::vector<Entry> entries_;
  int64_t total_ = 0;
  Tensor values_, grads_;
  std::vector<Tensor> params_;
};

}  // namespace dpcore
