#include "engine/data/bytes.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/error.h"

namespace dpcore::data {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  // A directory opens fine with fopen and then reports a meaningless size.
  std::error_code ec;
  DPCORE_CHECK(!std::filesystem::is_directory(path, ec), "cannot read ", path, ": it is a directory");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  DPCORE_CHECK(f, "cannot open ", path, ": ", std::strerror(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  DPCORE_CHECK(std::fseek(f, 0, SEEK_END) == 0, "cannot read ", path, ": ", std::strerror(errno));
  long size = std::ftell(f);
  DPCORE_CHECK(size >= 0, "cannot read ", path, ": ", std::strerror(errno));
  std::rewind(f);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  // (fread and memcpy must not see the null data() of an empty vector, even for 0 bytes.)
  size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f);
  DPCORE_CHECK(got == bytes.size(), "cannot read ", path, ": read ", got, " of ", size, " bytes",
               std::ferror(f) ? std::string(" (") + std::strerror(errno) + ")" : std::string());
  return bytes;
}

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

ByteReader::ByteReader(const uint8_t* data, size_t size, std::string source)
    : data_(data), size_(size), source_(std::move(source)) {
  if (!is_gzip(data, size)) return;
  zs_ = std::make_unique<z_stream_s>();  // value-initialised: zalloc/zfree/opaque null = defaults
  // 16 + MAX_WBITS: expect a gzip wrapper (header and CRC-checked trailer), not raw zlib.
  DPCORE_CHECK(inflateInit2(zs_.get(), 16 + MAX_WBITS) == Z_OK, source_, ": cannot start gzip decompression");
}

ByteReader::~ByteReader() {
  if (zs_) inflateEnd(zs_.get());
}

size_t ByteReader::read(uint8_t* dst, size_t n) {
  if (zs_) return inflate_into(dst, n);
  size_t k = std::min(n, size_ - pos_);
  if (k > 0) std::memcpy(dst, data_ + pos_, k);
  pos_ += k;
  return k;
}

size_t ByteReader::skip_rest(size_t limit) {
  uint8_t scratch[4096];
  size_t skipped = 0;
  while (skipped < limit) {
    size_t got = read(scratch, std::min(sizeof scratch, limit - skipped));
    if (got == 0) break;
    skipped += got;
  }
  return skipped;
}

size_t ByteReader::inflate_into(uint8_t* dst, size_t n) {
  size_t produced = 0;
  while (produced < n && !stream_ended_) {
    z_stream_s& zs = *zs_;
    zs.next_in = const_cast<Bytef*>(data_ + pos_);
    zs.avail_in = uInt(std::min<size_t>(size_ - pos_, UINT_MAX));
    zs.next_out = dst + produced;
    zs.avail_out = uInt(std::min<size_t>(n - produced, UINT_MAX));
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t consumed = size_t(zs.next_in - (data_ + pos_));
    size_t out = size_t(zs.next_out - (dst + produced));
    pos_ += consumed;
    produced += out;
    if (rc == Z_STREAM_END) {
      // A gzip file may hold several members back to back; anything else after one is junk.
      if (pos_ == size_) {
        stream_ended_ = true;
      } else {
        DPCORE_CHECK(is_gzip(data_ + pos_, size_ - pos_), source_, ": ", size_ - pos_,
                     " bytes of trailing garbage after the gzip data");
        inflateReset(&zs);
      }
    } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
      fail(source_, ": corrupt gzip data (zlib: ", zs.msg ? zs.msg : "invalid stream", ")");
    } else if (rc == Z_MEM_ERROR) {
      fail(source_, ": out of memory while decompressing gzip data");
    } else if (consumed == 0 && out == 0) {
      // No progress with room to write: zlib needs input that is not there.
      DPCORE_CHECK(pos_ < size_, source_, ": gzip data is truncated (the stream ends without its trailer)");
      fail(source_, ": gzip decompression made no progress (zlib code ", rc, ")");
    }
  }
  return produced;
}

}  // namespace dpcore::data
