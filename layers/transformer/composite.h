// A module made of named submodules whose forward is not a plain chain (a transformer
// layer adds residuals and passes a mask): the submodules' parameters and buffers are
// collected under their names ("attention.self.query" -> "...attention.self.query.weight"),
// and apply() (train/eval, batch positions) reaches every one of them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/module.h"

namespace dpcore::layers {

class Composite : public Module {
 public:
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override {
    for (auto& c : children_) c.second->collect_parameters(qualified_name(prefix, c.first), out);
  }
  void collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) override {
    for (auto& c : children_) c.second->collect_buffers(qualified_name(prefix, c.first), out);
  }
  void apply(const std::function<void(Module&)>& f) override {
    f(*this);
    for (auto& c : children_) c.second->apply(f);
  }

 protected:
  // Registers `module` under `name` (a dotted path is allowed: "attention.output.dense"),
  // in state_dict order, and returns it for the owner to call.
  template <class M>
  M& add_child(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(std::move(name), std::move(module));
    return ref;
  }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace dpcore::layers
