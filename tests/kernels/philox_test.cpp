// Philox4x32-10 (kernels/philox.h) against the known-answer vectors Random123 publishes
// (kat_vectors: counter, key -> output), the ones the SC'11 paper's generator must give.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/philox.h"

namespace dpcore::kernels {
namespace {

struct KnownAnswer {
  uint32_t counter[4], key[2], output[4];
};

const KnownAnswer kVectors[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox4x32_10, GivesRandom123sKnownAnswers) {
  for (const KnownAnswer& v : kVectors) {
    const Philox4x32 out =
        philox4x32_10(Philox4x32{{v.counter[0], v.counter[1], v.counter[2], v.counter[3]}}, v.key[0], v.key[1]);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.v[i], v.output[i]) << "word " << i << " of counter " << std::hex << v.counter[0];
  }
}

}  // namespace
}  // namespace dpcore::kernels
