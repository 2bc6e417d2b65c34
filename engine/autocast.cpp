#include "engine/autocast.h"

#include "kernels/error.h"

namespace dpcore {

namespace {
thread_local DType current = DType::Float32;
}

DType autocast_dtype() { return current; }

AutocastScope::AutocastScope(DType dtype) : previous_(current) {
  DPCORE_CHECK(dtype == DType::Float32 || is_half_precision(dtype), "autocast: computes in bfloat16 or float16 ",
               "(float32 turns it off), not ", dtype_name(dtype));
  current = dtype;
}

AutocastScope::~AutocastScope() { current = previous_; }

}  // namespace dpcore
