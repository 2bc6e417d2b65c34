// The dropout masks' Philox words (kernels/dropout_config.h) sixteen counters at a time: the
// four words of elements 4 g .. 4 g + 3 of one sample for 16 consecutive groups g, in
// element order. Two implementations of one rule: a portable loop that any compiler
// vectorises as it can, and AVX-512 intrinsics that keep the 16 counters in one register
// per word. The words are integers, so both give the bits of dropout_words, which
// tests/kernels/philox_test.cpp checks for each. Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "kernels/dropout_config.h"

namespace dpcore::kernels::cpu {

constexpr int64_t kPhiloxBlockGroups = 16, kPhiloxBlockWords = 4 * kPhiloxBlockGroups;

// words[4 g + k] = dropout_words(cfg.seed, cfg.step, sample, first_group + g).v[k] for g < 16.
void philox_block_portable(const DropoutConfig& cfg, int64_t sample, int64_t first_group, uint32_t* words);
// The same with AVX-512F; only on a CPU that has it (vector_width() is VectorWidth::Avx512).
void philox_block_avx512(const DropoutConfig& cfg, int64_t sample, int64_t first_group, uint32_t* words);

// The fastest of the two this CPU runs.
void philox_block(const DropoutConfig& cfg, int64_t sample, int64_t first_group, uint32_t* words);

}  // namespace dpcore::kernels::cpu
