// Builders for dataset files, valid or broken on purpose: used by the tests and by the
// writer of the fuzzers' seed inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpcore::testing {

using Bytes = std::vector<uint8_t>;

// An IDX file: big-endian magic, one big-endian uint32 per dimension, then `values`.
Bytes idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& values);

// `raw` as one gzip member (what gzip(1) writes).
Bytes gzip_bytes(const Bytes& raw);

// CIFAR-10 records: labels[i], then pixels[i * 3072 .. (i + 1) * 3072).
Bytes cifar10_bytes(const Bytes& labels, const Bytes& pixels);

// n values where value i is (i * 7 + salt) mod 256: every position distinguishable.
Bytes pattern_bytes(size_t n, uint32_t salt);

void write_bytes(const std::string& path, const Bytes& bytes);

}  // namespace dpcore::testing
