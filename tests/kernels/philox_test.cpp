// Philox4x32-10 (kernels/philox.h) against the known-answer vectors Random123 publishes
// (kat_vectors: counter, key -> output), the ones the SC'11 paper's generator must give;
// and the CPU's 16-counter blocks (kernels/cpu/philox_block.h), each implementation, word
// for word against the one-counter function the dropout rule is written with.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/philox_block.h"
#include "kernels/cpu/vector_variants.h"
#include "kernels/dropout_config.h"
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

// Keys and steps with both 32-bit halves set, samples past 2^31, and first groups that put
// the block across a multiple of 16 and across the 32-bit wrap of the group word.
template <class Block>
void expect_blocks_are_dropout_words(const Block& block) {
  const uint64_t seeds[] = {0, 0x0123456789abcdefull, ~uint64_t(0)};
  const uint64_t steps[] = {0, 7 + (uint64_t(1) << 33)};
  const int64_t samples[] = {0, 11, (int64_t(1) << 32) - 1};
  const int64_t first_groups[] = {0, 5, 1000, (int64_t(1) << 32) - 7};
  std::vector<uint32_t> words(size_t(cpu::kPhiloxBlockWords));
  for (uint64_t seed : seeds)
    for (uint64_t step : steps)
      for (int64_t sample : samples)
        for (int64_t first : first_groups) {
          const DropoutConfig cfg{0.1, seed, step, 0};
          block(cfg, sample, first, words.data());
          for (int64_t g = 0; g < cpu::kPhiloxBlockGroups; ++g) {
            const Philox4x32 want = dropout_words(seed, step, sample, first + g);
            for (int k = 0; k < 4; ++k)
              ASSERT_EQ(words[size_t(4 * g + k)], want.v[k])
                  << "seed " << seed << ", step " << step << ", sample " << sample << ", group " << first + g
                  << ", word " << k;
          }
        }
}

TEST(PhiloxBlock, PortableLoopGivesTheDropoutWords) { expect_blocks_are_dropout_words(cpu::philox_block_portable); }

TEST(PhiloxBlock, Avx512GivesTheDropoutWords) {
  if (cpu::vector_width() != cpu::VectorWidth::Avx512) GTEST_SKIP() << "this CPU has no AVX-512F";
  expect_blocks_are_dropout_words(cpu::philox_block_avx512);
}

}  // namespace
}  // namespace dpcore::kernels
