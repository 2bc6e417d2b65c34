#include "comm/checks.h"

namespace dpcore::comm {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "average"; }

void check_defined(const std::string& op, const char* what, const Tensor& t) {
  DPCORE_CHECK(t.defined(), op, ": the ", what, " tensor is undefined");
}

void check_reducible(const std::string& op, const Tensor& t, ReduceOp reduce, bool integers_ok) {
  check_defined(op, "input", t);
  const bool integer = t.dtype() == DType::Int32 || t.dtype() == DType::Int64;
  // 16-bit floats are summed, each partial sum rounded back to 16 bits as NCCL's kernels do
  // (--grad-dtype bf16's allreduce); their average would round twice, so it is left out.
  const bool sum = reduce == ReduceOp::Sum;
  DPCORE_CHECK(is_floating(t.dtype()) || (is_half_precision(t.dtype()) && sum) || (integer && integers_ok && sum), op,
               ": cannot ", reduce_op_name(reduce), "-reduce ", t.str(), " (supported: float32, float64; bfloat16 and float16",
               integers_ok ? ", int32 and int64" : "", " for sum)");
}

void check_root(const std::string& op, int root, int size) {
  DPCORE_CHECK(0 <= root && root < size, op, ": root ", root, " is not a rank of this group of ", size);
}

void check_point_to_point(const std::string& op, const char* role, int peer, int tag, const Tensor& t, int rank,
                          int size) {
  check_defined(op, "message", t);
  DPCORE_CHECK(0 <= peer && peer < size, op, ": ", role, " ", peer, " is not a rank of this group of ", size);
  DPCORE_CHECK(peer != rank, op, ": ", role, " ", peer,
               " is this rank itself; a rank cannot send to or receive from itself");
  DPCORE_CHECK(tag >= 0, op, ": tag ", tag, " must not be negative");
}

namespace {
void check_same_kind(const std::string& op, const Tensor& in, const Tensor& out) {
  check_defined(op, "input", in);
  check_defined(op, "output", out);
  DPCORE_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), op, ": input ", in.str(), " and output ",
               out.str(), " differ in dtype or device");
}
}  // namespace

void check_allgather_args(const std::string& op, const Tensor& in, const Tensor& out, int size) {
  check_same_kind(op, in, out);
  DPCORE_CHECK(out.numel() == size * in.numel(), op, ": output ", out.str(), " must have ", size, " x ", in.numel(),
               " elements (world size x input ", in.str(), ")");
}

void check_reduce_scatter_args(const std::string& op, const Tensor& in, const Tensor& out, int size) {
  check_same_kind(op, in, out);
  DPCORE_CHECK(in.numel() == size * out.numel(), op, ": input ", in.str(), " must have ", size, " x ", out.numel(),
               " elements (world size x output ", out.str(), ")");
}

void check_distinct_gpus(const std::vector<std::string>& gpus) {
  for (size_t j = 1; j < gpus.size(); ++j) {
    for (size_t i = 0; i < j; ++i) {
      DPCORE_CHECK(gpus[i] != gpus[j], "nccl: ranks ", i, " and ", j, " would share ", gpus[i],
                   "; NCCL refuses two ranks on one GPU — use --backend local for several replicas on one GPU");
    }
  }
}

}  // namespace dpcore::comm
