// Where a tensor's storage lives: the host ("cpu") or one CUDA GPU ("cuda:N").
#pragma once

#include <string>

namespace dpcore {

struct Device {
  enum class Type { CPU, CUDA };
  Type type = Type::CPU;
  int index = 0;

  static Device cpu() { return {Type::CPU, 0}; }
  static Device cuda(int index = 0) { return {Type::CUDA, index}; }

  bool is_cpu() const { return type == Type::CPU; }
  bool is_cuda() const { return type == Type::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (type == Type::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }

  // "cpu", "cuda:0"
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; throws std::invalid_argument otherwise.
  static Device parse(const std::string& text);
};

}  // namespace dpcore
