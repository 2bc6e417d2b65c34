#include "data_files.h"

#include <zlib.h>

#include <cstdio>
#include <stdexcept>

namespace dpcore::testing {

static void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

Bytes idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& values) {
  Bytes out;
  put_be32(out, magic);
  for (uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

Bytes gzip_bytes(const Bytes& raw) {
  z_stream zs{};
  // 16 + MAX_WBITS: a gzip wrapper; memLevel 8 is zlib's default.
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  Bytes out(deflateBound(&zs, uLong(raw.size())));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = uInt(raw.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

Bytes cifar10_bytes(const Bytes& labels, const Bytes& pixels) {
  const size_t record_pixels = 3 * 32 * 32;
  if (pixels.size() != labels.size() * record_pixels) throw std::invalid_argument("cifar10_bytes: pixel count");
  Bytes out;
  for (size_t i = 0; i < labels.size(); ++i) {
    out.push_back(labels[i]);
    out.insert(out.end(), pixels.begin() + i * record_pixels, pixels.begin() + (i + 1) * record_pixels);
  }
  return out;
}

Bytes pattern_bytes(size_t n, uint32_t salt) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = uint8_t(i * 7 + salt);
  return out;
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  size_t wrote = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  if (std::fclose(f) != 0 || wrote != bytes.size()) throw std::runtime_error("cannot write " + path);
}

}  // namespace dpcore::testing
