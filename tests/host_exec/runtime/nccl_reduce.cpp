// What each collective computes (nccl_clique.h's result_for), in a fixed order so that every
// run gives the same bits: rank 0's value, then rank 1's combined in, then rank 2's...
#include <cmath>
#include <cstring>
#include <type_traits>

#include "host_exec/runtime/nccl_clique.h"
#include "kernels/half_types.h"

namespace host_runtime::nccl {
namespace {

const char* type_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt32: return "int32";
    case ncclInt64: return "int64";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclFloat16: return "float16";
    case ncclBfloat16: return "bfloat16";
  }
  return "?";
}

const char* reduce_name(ncclRedOp_t reduce) {
  switch (reduce) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
  }
  return "?";
}

bool reduces(Op::Kind kind) {
  return kind == Op::Kind::AllReduce || kind == Op::Kind::Reduce || kind == Op::Kind::ReduceScatter;
}
bool rooted(Op::Kind kind) { return kind == Op::Kind::Broadcast || kind == Op::Kind::Reduce; }

// Integers wrap around, as on a GPU (no undefined overflow).
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  return a + b;
}
template <class T>
T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
  return a * b;
}

// A 16-bit float combined as NCCL's kernels combine bfloat16 and float16: widened to
// float32, combined, and the result rounded back to 16 bits at every step.
using dpcore::kernels::BFloat16;
using dpcore::kernels::Float16;
float widen(BFloat16 h) { return dpcore::kernels::bfloat16_to_float(h); }
float widen(Float16 h) { return dpcore::kernels::float16_to_float(h); }
template <class H>
H narrow(float f) {
  if constexpr (std::is_same_v<H, BFloat16>) return dpcore::kernels::float_to_bfloat16(f);
  else return dpcore::kernels::float_to_float16(f);
}
template <class H>
void reduce_half_into(H* out, const std::vector<const H*>& in, size_t count, ncclRedOp_t reduce) {
  const int n = int(in.size());
  for (size_t i = 0; i < count; ++i) {
    H acc{};
    for (int q = 0; q < n; ++q) {
      float x = widen(in[q][i]);
      if (reduce == ncclAvg) x = widen(narrow<H>(x * (1.0f / float(n))));  // NCCL: a pre-multiplied sum
      if (q == 0) {
        acc = narrow<H>(x);
        continue;
      }
      const float a = widen(acc);
      switch (reduce) {
        case ncclSum:
        case ncclAvg: acc = narrow<H>(a + x); break;
        case ncclProd: acc = narrow<H>(a * x); break;
        case ncclMax: acc = narrow<H>(std::fmax(a, x)); break;
        case ncclMin: acc = narrow<H>(std::fmin(a, x)); break;
      }
    }
    out[i] = acc;
  }
}

// out[i] = in[0][i] (op) in[1][i] (op) ..., left to right. Max and min are fmax and fmin
// for floating types, as NCCL's kernels use.
template <class T>
void reduce_numbers_into(T* out, const std::vector<const T*>& in, size_t count, ncclRedOp_t reduce) {
  const int n = int(in.size());
  for (size_t i = 0; i < count; ++i) {
    T acc{};
    for (int q = 0; q < n; ++q) {
      const T x = in[q][i];
      if (reduce == ncclAvg && std::is_floating_point_v<T>) {
        const T scaled = x * (T(1) / T(n));  // NCCL: a pre-multiplied sum
        acc = q == 0 ? scaled : add(acc, scaled);
        continue;
      }
      if (q == 0) {
        acc = x;
        continue;
      }
      switch (reduce) {
        case ncclSum:
        case ncclAvg: acc = add(acc, x); break;
        case ncclProd: acc = multiply(acc, x); break;
        case ncclMax: acc = std::is_floating_point_v<T> ? T(std::fmax(acc, x)) : (acc < x ? x : acc); break;
        case ncclMin: acc = std::is_floating_point_v<T> ? T(std::fmin(acc, x)) : (x < acc ? x : acc); break;
      }
    }
    if (reduce == ncclAvg && !std::is_floating_point_v<T>) acc = acc / T(n);  // NCCL: sum, then divide
    out[i] = acc;
  }
}

template <class T>
void reduce_into(T* out, const std::vector<const T*>& in, size_t count, ncclRedOp_t reduce) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) reduce_half_into(out, in, count, reduce);
  else reduce_numbers_into(out, in, count, reduce);
}

template <class T>
std::vector<char> compute(int rank, const std::vector<Op>& calls) {
  const Op& op = calls[rank];
  const size_t n = calls.size(), count = op.count;
  std::vector<const T*> inputs;
  for (const Op& call : calls) inputs.push_back(static_cast<const T*>(call.send));
  const auto bytes_of = [](size_t elements) { return std::vector<char>(elements * sizeof(T)); };
  switch (op.kind) {
    case Op::Kind::AllReduce:
    case Op::Kind::Reduce: {
      if (op.kind == Op::Kind::Reduce && rank != op.root) return {};
      std::vector<char> out = bytes_of(count);
      reduce_into(reinterpret_cast<T*>(out.data()), inputs, count, op.reduce);
      return out;
    }
    case Op::Kind::ReduceScatter: {
      for (const T*& input : inputs) input += size_t(rank) * count;
      std::vector<char> out = bytes_of(count);
      reduce_into(reinterpret_cast<T*>(out.data()), inputs, count, op.reduce);
      return out;
    }
    case Op::Kind::Broadcast: {
      std::vector<char> out = bytes_of(count);
      std::memcpy(out.data(), inputs[op.root], out.size());
      return out;
    }
    case Op::Kind::AllGather: {
      std::vector<char> out = bytes_of(n * count);
      for (size_t q = 0; q < n; ++q) std::memcpy(out.data() + q * count * sizeof(T), inputs[q], count * sizeof(T));
      return out;
    }
    case Op::Kind::Send:
    case Op::Kind::Recv: break;
  }
  return {};
}

}  // namespace

const char* name_of(Op::Kind kind) {
  switch (kind) {
    case Op::Kind::AllReduce: return "ncclAllReduce";
    case Op::Kind::Broadcast: return "ncclBroadcast";
    case Op::Kind::Reduce: return "ncclReduce";
    case Op::Kind::AllGather: return "ncclAllGather";
    case Op::Kind::ReduceScatter: return "ncclReduceScatter";
    case Op::Kind::Send: return "ncclSend";
    case Op::Kind::Recv: return "ncclRecv";
  }
  return "?";
}

std::string describe(const Op& op) {
  std::string text = std::string(name_of(op.kind)) + " of " + std::to_string(op.count) + " " + type_name(op.type);
  if (reduces(op.kind)) text += std::string(" (") + reduce_name(op.reduce) + ")";
  if (rooted(op.kind)) text += " (root " + std::to_string(op.root) + ")";
  if (op.kind == Op::Kind::Send) text += " to rank " + std::to_string(op.root);
  if (op.kind == Op::Kind::Recv) text += " from rank " + std::to_string(op.root);
  return text;
}

bool same_call(const Op& a, const Op& b) {
  return a.kind == b.kind && a.count == b.count && a.type == b.type &&
         (!reduces(a.kind) || a.reduce == b.reduce) && (!rooted(a.kind) || a.root == b.root);
}

bool valid_type(ncclDataType_t type) {
  return type == ncclInt32 || type == ncclInt64 || type == ncclFloat32 || type == ncclFloat64 ||
         type == ncclFloat16 || type == ncclBfloat16;
}

bool valid_reduce(ncclRedOp_t reduce) { return reduce >= ncclSum && reduce <= ncclAvg; }

size_t type_size(ncclDataType_t type) {
  if (type == ncclFloat16 || type == ncclBfloat16) return 2;
  return type == ncclInt32 || type == ncclFloat32 ? 4 : 8;
}

std::vector<char> result_for(int rank, const std::vector<Op>& calls) {
  switch (calls[rank].type) {
    case ncclInt32: return compute<int32_t>(rank, calls);
    case ncclInt64: return compute<int64_t>(rank, calls);
    case ncclFloat32: return compute<float>(rank, calls);
    case ncclFloat64: return compute<double>(rank, calls);
    case ncclFloat16: return compute<Float16>(rank, calls);
    case ncclBfloat16: return compute<BFloat16>(rank, calls);
  }
  return {};
}

}  // namespace host_runtime::nccl
