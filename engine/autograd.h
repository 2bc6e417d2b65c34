// Reverse-mode automatic differentiation.
//
// Every op that records (engine/ops/) gives its output a Node: the op's backward,
// holding what it saved from the forward and one Edge per input. Leaves that require a
// gradient get an AccumulateGrad node, which adds into the leaf's .grad buffer in place
// and then runs the leaf's post-accumulate hooks. backward() walks the graph in reverse
// creation order (the highest sequence number first, as PyTorch does), so a layer's
// gradients become final in reverse layer order: exactly what DDP's buckets rely on.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace dpcore::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // Gradients with respect to each input, given the gradient of the output. An undefined
  // tensor means "no gradient" (or, see in_place_grad, "already accumulated").
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;

  std::vector<Edge> next;
  uint64_t sequence_nr;

  // Fast path for parameter gradients: if input `i` is a leaf whose gradient buffer exists,
  // returns that buffer so the kernel can accumulate into it directly (no temporary, no
  // extra pass), and remembers that input i was handled in place. Else undefined.
  Tensor in_place_grad(size_t i);
  bool handled_in_place(size_t i) const { return i < in_place_.size() && in_place_[i]; }
  void clear_in_place() { in_place_.clear(); }

 private:
  std::vector<bool> in_place_;
};

// Adds incoming gradients into a leaf's gradient buffer.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const Tensor& grad) override;
  // Runs the leaf's hooks when the gradient was accumulated in place by the producer.
  void run_hooks();
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// True when ops should record graphs on this thread (false inside a NoGradGuard).
bool grad_mode_enabled();

// Evaluation mode: while one lives, ops on this thread record nothing.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();

 private:
  bool previous_;
};

// The edge that carries a gradient to `t`: its grad_fn, its AccumulateGrad, or none.
Edge edge_to(const Tensor& t);
// Attaches `node` as the grad_fn of `output` with edges to `inputs`, if grad mode is on
// and any input requires a gradient. Returns whether it recorded.
bool record(const std::shared_ptr<Node>& node, Tensor& output, const std::vector<Tensor>& inputs);

// Runs the backward pass from `root` seeded with `seed`.
void run_backward(const Tensor& root, const Tensor& seed);

}  // namespace dpcore::autograd
