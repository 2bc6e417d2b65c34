#include "engine/random.h"

namespace dpcore {

uint64_t Generator::below(uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // largest multiple of n
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

}  // namespace dpcore
