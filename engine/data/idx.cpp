#include "engine/data/idx.h"

#include <algorithm>
#include <cstdio>

#include "engine/data/bytes.h"
#include "kernels/error.h"

namespace dpcore::data {

static constexpr uint8_t kUnsignedByte = 0x08;
// The header limits sizes to uint32 per dimension; this bounds their product so that it
// cannot overflow (2^62 bytes is far beyond any real file).
static constexpr uint64_t kMaxFileValues = uint64_t(1) << 62;
// Decompressed data is read and stored this much at a time, so a header that lies about
// the size costs at most the data that is really there.
static constexpr size_t kChunk = size_t(1) << 20;

static std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", unsigned(v));
  return buf;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

static uint32_t read_be32(ByteReader& in, const char* what) {
  uint8_t b[4];
  size_t got = in.read(b, 4);
  DPCORE_CHECK(got == 4, in.source(), ": file ends inside the IDX header (", what, ")");
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

// Reads and checks the header; returns the dimensions.
static std::vector<int64_t> read_header(ByteReader& in, int ndims) {
  const uint32_t expected = uint32_t(kUnsignedByte) << 8 | uint32_t(ndims);
  const uint32_t magic = read_be32(in, "magic number");
  DPCORE_CHECK(magic >> 8 == expected >> 8, in.source(), ": wrong magic number ", hex32(magic), ", expected ",
               hex32(expected), " (an IDX file of unsigned bytes with ", ndims, " dimensions)");
  DPCORE_CHECK(magic == expected, in.source(), ": wrong dimension count ", magic & 0xff, ", expected ", ndims,
               " (magic number ", hex32(magic), ", expected ", hex32(expected), ")");
  std::vector<int64_t> dims(ndims);
  for (int i = 0; i < ndims; ++i) dims[i] = read_be32(in, "dimension sizes");
  return dims;
}

// Number of values the dimensions describe; throws when it is absurdly large, so that
// the arithmetic on it cannot overflow.
static uint64_t value_count(const std::vector<int64_t>& dims, const std::string& source) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  uint64_t count = 1;
  for (int64_t d : dims) {
    DPCORE_CHECK(count <= kMaxFileValues / uint64_t(d), source, ": header dimensions ", dims_str(dims),
                 " are impossibly large");
    count *= uint64_t(d);
  }
  return count;
}

IdxArray parse_idx(const uint8_t* bytes, size_t size, int ndims, const std::string& source) {
  DPCORE_CHECK(ndims >= 1 && ndims <= 255, source, ": an IDX file cannot have ", ndims, " dimensions");
  ByteReader in(bytes, size, source);
  IdxArray out;
  out.dims = read_header(in, ndims);
  const uint64_t expected = value_count(out.dims, source);
  while (out.values.size() < expected) {
    size_t have = out.values.size();
    size_t want = size_t(std::min<uint64_t>(expected - have, kChunk));
    out.values.resize(have + want);
    size_t got = in.read(out.values.data() + have, want);
    DPCORE_CHECK(got == want, source, ": truncated: the header (", dims_str(out.dims), ") needs ", expected,
                 " bytes of data, the file holds ", have + got);
  }
  const size_t trailing = in.skip_rest(kChunk);
  DPCORE_CHECK(trailing == 0, source, ": ", trailing == kChunk ? "at least " : "", trailing,
               " trailing bytes after the ", expected, " bytes of data the header (", dims_str(out.dims),
               ") describes");
  return out;
}

IdxArray read_idx_file(const std::string& path, int ndims) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx(bytes.data(), bytes.size(), ndims, path);
}

}  // namespace dpcore::data
