#include "train/faults/guards.h"

#include <cstring>
#include <iomanip>
#include <map>
#include <sstream>

#include "kernels/error.h"
#include "train/faults/replica_failure.h"

namespace dpcore::train {

namespace {

// The tensor on the host (itself when it is there already).
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

template <class Bits>
bool bits_finite(const void* data, int64_t n, Bits exponent) {
  const auto* p = static_cast<const unsigned char*>(data);
  Bits any_special = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, p + i * int64_t(sizeof(Bits)), sizeof(Bits));
    // Branch-free over the whole buffer: a NaN or Inf has every exponent bit set.
    any_special |= Bits((v & exponent) == exponent);
  }
  return any_special == 0;
}

// 64-bit words, the last one zero-padded; the byte count goes in first, so that tensors
// differing only in length (never the case between replicas, but cheap) differ too.
uint64_t checksum_bytes(const unsigned char* p, size_t bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;  // FNV-1a's 64-bit prime: odd
  uint64_t h = 0xcbf29ce484222325ULL ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = (h ^ word) * kPrime;
  }
  if (i < bytes) {
    uint64_t word = 0;
    std::memcpy(&word, p + i, bytes - i);
    h = (h ^ word) * kPrime;
  }
  return h;
}

// Each entry's elements of a flat buffer (padding between tensors left out: it is
// nobody's state).
void add_checksums(const Tensor& flat, const std::vector<FlatParameters::Entry>& entries, std::vector<uint64_t>& out) {
  Tensor host = on_host(flat);
  const size_t esize = dtype_size(host.dtype());
  const auto* base = static_cast<const unsigned char*>(host.raw_data());
  for (const FlatEntry& e : entries) {
    out.push_back(checksum_bytes(base + size_t(e.offset) * esize, size_t(shape_numel(e.shape)) * esize));
  }
}

std::string list_replicas(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "replica " : "replicas ") + list_numbers(ranks);
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

}  // namespace

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return true;
  Tensor host = on_host(t);
  switch (host.dtype()) {
    case DType::Float32: return bits_finite<uint32_t>(host.raw_data(), host.numel(), 0x7f800000u);
    case DType::Float64: return bits_finite<uint64_t>(host.raw_data(), host.numel(), 0x7ff0000000000000ull);
    case DType::BFloat16: return bits_finite<uint16_t>(host.raw_data(), host.numel(), 0x7f80u);
    case DType::Float16: return bits_finite<uint16_t>(host.raw_data(), host.numel(), 0x7c00u);
    case DType::Int32:
    case DType::Int64: return true;  // integers are always finite
  }
  return true;
}

bool step_is_nonfinite(const Tensor& loss_sum, const Tensor& grads) { return !all_finite(loss_sum) || !all_finite(grads); }

std::vector<std::string> checked_tensor_names(const layers::Model& model, const Optimizer& optimizer) {
  std::vector<std::string> names;
  const auto& entries = model.parameters().entries();
  for (const FlatEntry& e : entries) names.push_back(e.name);
  for (const OptimizerState& s : optimizer.state()) {
    for (const FlatEntry& e : entries) names.push_back(s.name + " of " + e.name);
  }
  return names;
}

std::vector<uint64_t> replica_checksums(const layers::Model& model, const Optimizer& optimizer) {
  std::vector<uint64_t> sums;
  const auto& entries = model.parameters().entries();
  add_checksums(model.parameters().values(), entries, sums);
  for (const OptimizerState& s : optimizer.state()) add_checksums(s.tensor, entries, sums);
  return sums;
}

std::string compare_checksums(const std::vector<std::vector<uint64_t>>& checksums,
                              const std::vector<std::string>& names, int64_t step) {
  const size_t ranks = checksums.size();
  for (size_t t = 0; t < names.size(); ++t) {
    // The value most replicas hold (ties: the lowest rank's) is taken as right.
    std::map<uint64_t, int> count;
    for (size_t r = 0; r < ranks; ++r) count[checksums[r][t]]++;
    if (count.size() == 1) continue;
    uint64_t majority = checksums[0][t];
    for (size_t r = 0; r < ranks; ++r) {
      if (count[checksums[r][t]] > count[majority]) majority = checksums[r][t];
    }
    std::vector<int> differing, agreeing;
    for (size_t r = 0; r < ranks; ++r) (checksums[r][t] == majority ? agreeing : differing).push_back(int(r));
    std::ostringstream os;
    os << "--check-replicas: after step " << step << ", " << list_replicas(differing)
       << (differing.size() == 1 ? " differs" : " differ") << " from " << list_replicas(agreeing) << ": first in "
       << names[t] << " (bit checksum "
       << hex(checksums[size_t(differing[0])][t]) << " against " << hex(majority) << ")";
    if (ranks == 2) os << "; with two replicas, which of them is wrong cannot be told";
    os << ". Replicas that should be identical have diverged (a flipped bit, a non-deterministic kernel): "
          "resume from the last checkpoint";
    return os.str();
  }
  return "";
}

std::string check_replicas(comm::Communicator& comm, const layers::Model& model, const Optimizer& optimizer, int64_t step) {
  const std::vector<uint64_t> mine = replica_checksums(model, optimizer);
  // Each checksum as four 16-bit pieces in float32 (integers below 2^24 are exact in any
  // float arithmetic or copy a transport might do), gathered from every rank.
  std::vector<float> packed;
  for (uint64_t h : mine) {
    for (int piece = 0; piece < 4; ++piece) packed.push_back(float((h >> (16 * piece)) & 0xffff));
  }
  const int64_t per_rank = int64_t(packed.size());
  Tensor in = Tensor::from_vector(packed, {per_rank}, model.device());
  Tensor out = Tensor::empty({per_rank * comm.size()}, DType::Float32, model.device());
  comm.allgather(in, out).wait();
  const std::vector<float> all = out.to_vector<float>();
  std::vector<std::vector<uint64_t>> checksums(size_t(comm.size()), std::vector<uint64_t>(mine.size(), 0));
  for (size_t r = 0; r < checksums.size(); ++r) {
    for (size_t t = 0; t < mine.size(); ++t) {
      for (int piece = 0; piece < 4; ++piece) {
        const float v = all[r * size_t(per_rank) + t * 4 + size_t(piece)];
        checksums[r][t] |= uint64_t(v) << (16 * piece);
      }
    }
  }
  return compare_checksums(checksums, checked_tensor_names(model, optimizer), step);
}

}  // namespace dpcore::train
