#include "engine/autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>

#include "engine/backend.h"
#include "engine/trace.h"

namespace dpcore::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
thread_local bool grad_mode = true;
}  // namespace

Node::Node() : sequence_nr(next_sequence_nr++) {}

Tensor Node::in_place_grad(size_t i) {
  if (i >= next.size() || !next[i].node) return Tensor();
  auto* acc = dynamic_cast<AccumulateGrad*>(next[i].node.get());
  if (!acc) return Tensor();
  auto leaf = acc->leaf();
  if (!leaf || !leaf->grad) return Tensor();
  if (in_place_.size() < next.size()) in_place_.resize(next.size(), false);
  in_place_[i] = true;
  return Tensor(leaf->grad);
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad) {
  auto leaf = leaf_.lock();
  if (!leaf) return {};
  if (grad.defined()) {
    if (leaf->grad) {
      Tensor g(leaf->grad);
      backend_for(g.device()).add(g, grad, g);  // (16-bit leaves too: a pipeline stage's input)
    } else {
      leaf->grad = grad.clone().impl_ptr();  // own the buffer: grad may alias other tensors
    }
  }
  run_hooks();
  return {};
}

void AccumulateGrad::run_hooks() {
  auto leaf = leaf_.lock();
  if (!leaf || !leaf->grad) return;
  Tensor g(leaf->grad);
  for (auto& hook : leaf->post_accumulate_hooks) hook(g);
}

bool grad_mode_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

Edge edge_to(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn};
  // A leaf: share one AccumulateGrad per leaf, so that every use of it meets in one node
  // and its hooks run once, after the last contribution.
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc};
}

bool record(const std::shared_ptr<Node>& node, Tensor& output, const std::vector<Tensor>& inputs) {
  if (!grad_mode) return false;
  bool any = false;
  for (const Tensor& in : inputs) any = any || in.requires_grad();
  if (!any) return false;
  node->next.clear();
  for (const Tensor& in : inputs) node->next.push_back(edge_to(in));
  output.impl().requires_grad = true;
  output.impl().grad_fn = node;
  return true;
}

namespace {
// A node's span in a trace: its name and the gradient it receives; for AccumulateGrad, the
// parameter's shape and where its gradient lives in the flat gradient buffer (the offset a
// DDP bucket's range is made of), since that is where the gradient becomes final.
trace::Label trace_label(const Node& node, const Tensor& grad) {
  trace::Label label{node.name(), {}};
  if (auto* acc = dynamic_cast<const AccumulateGrad*>(&node)) {
    if (auto leaf = acc->leaf()) {
      label.args.push_back({"param", shape_str(leaf->shape)});
      if (leaf->grad) label.args.push_back({"grad_offset", int64_t(leaf->grad->offset / dtype_size(leaf->grad->dtype))});
    }
  } else if (grad.defined()) {
    label.args.push_back({"grad_output", shape_str(grad.shape())});
  }
  return label;
}
}  // namespace

void run_backward(const Tensor& root, const Tensor& seed_in) {
  DPCORE_CHECK(root.requires_grad(), "backward: ", root.str(), " does not require a gradient ",
               "(no input of the graph requires grad, or it was computed in evaluation mode)");
  Tensor seed = seed_in;
  if (!seed.defined()) {
    DPCORE_CHECK(root.numel() == 1, "backward: an implicit seed needs a one-element tensor, got ", root.str());
    seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  DPCORE_CHECK(seed.shape() == root.shape(), "backward: seed ", seed.str(), " does not match ", root.str());
  if (seed.dtype() != root.dtype() && (is_half_precision(seed.dtype()) || is_half_precision(root.dtype()))) {
    // As PyTorch's engine does with every gradient: converted to the dtype of the tensor it
    // is the gradient of, so a node's backward sees its output's dtype (a float32 seed of a
    // bfloat16 output is rounded to bfloat16 first; Backend::cast says which pairs convert).
    Tensor converted = Tensor::empty(root.shape(), root.dtype(), root.device());
    backend_for(root.device()).cast(seed, converted);
    seed = converted;
  }
  std::shared_ptr<Node> start = edge_to(root).node;
  trace::Span pass("backward", [&] { return trace::Label{"backward", {{"from", shape_str(root.shape())}}}; });

  // Count how many edges lead into each node, so a node runs only once all of its
  // gradient contributions have arrived.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{start.get()};
  dependencies[start.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      if (dependencies.emplace(e.node.get(), 0).second) stack.push_back(e.node.get());
      dependencies[e.node.get()]++;
    }
  }

  // Highest sequence number first: reverse creation order, deterministic.
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(
      later_first);
  std::unordered_map<Node*, Tensor> pending;  // summed incoming gradient per node
  pending[start.get()] = seed;
  ready.push(start);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Tensor grad = std::move(pending[node.get()]);
    pending.erase(node.get());
    node->clear_in_place();
    // A node whose contributions were all accumulated in place has nothing left to
    // propagate; AccumulateGrad still runs, to fire the leaf's hooks.
    std::vector<Tensor> input_grads;
    if (grad.defined() || dynamic_cast<AccumulateGrad*>(node.get())) {
      trace::Span span("backward", [&] { return trace_label(*node, grad); });
      input_grads = node->apply(grad);
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      Node* next = node->next[i].node.get();
      if (!next) continue;
      if (i < input_grads.size() && input_grads[i].defined() && !node->handled_in_place(i)) {
        Tensor& slot = pending[next];
        if (!slot.defined()) {
          slot = input_grads[i];
        } else {
          Tensor total = Tensor::empty(slot.shape(), slot.dtype(), slot.device());
          backend_for(slot.device()).add(slot, input_grads[i], total);
          slot = total;
        }
      }
      if (--dependencies[next] == 0) ready.push(node->next[i].node);
    }
  }
}

}  // namespace dpcore::autograd
