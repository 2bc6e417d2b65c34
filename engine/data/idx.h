// IDX, the file format of (Fashion-)MNIST. A big-endian header: two zero bytes, a type
// byte (0x08 = unsigned byte, the only type these datasets use), a dimension-count byte,
// then one uint32 per dimension; the values follow row-major, and nothing after them.
// Images are magic 0x00000803 [N, H, W], labels 0x00000801 [N].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpcore::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;  // product(dims) bytes, row-major
};

// Parses an IDX array of unsigned bytes with `ndims` dimensions, raw or gzip-compressed
// (detected by the gzip magic). Throws dpcore::Error naming `source` (normally the file)
// for a wrong magic number or dimension count and for data shorter or longer than the
// header says; memory grows with the data actually present, never with the header's claim.
IdxArray parse_idx(const uint8_t* bytes, size_t size, int ndims, const std::string& source);

IdxArray read_idx_file(const std::string& path, int ndims);

// "60000 x 28 x 28"
std::string dims_str(const std::vector<int64_t>& dims);

}  // namespace dpcore::data
