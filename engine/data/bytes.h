// Files as bytes, and a sequential reader that inflates gzip data as it goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct z_stream_s;

namespace dpcore::data {

// The whole file. Its size comes from the file system, never from a header inside it.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// True when the bytes start with the gzip magic 1f 8b.
bool is_gzip(const uint8_t* data, size_t size);

// Reads a byte buffer from the front. A buffer in gzip format (by its magic bytes, whatever
// the file is called) is inflated on the fly, so a caller that knows how many bytes it
// expects decompresses, and allocates for, no more than that. Corrupt or truncated gzip data
// throws dpcore::Error naming `source`.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string source);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Copies up to n bytes into dst; returns fewer only when the data ends.
  size_t read(uint8_t* dst, size_t n);
  // Reads and discards what is left, up to `limit` bytes; returns how many there were.
  size_t skip_rest(size_t limit);

  bool gzip() const { return zs_ != nullptr; }
  const std::string& source() const { return source_; }

 private:
  size_t inflate_into(uint8_t* dst, size_t n);

  const uint8_t* data_;
  size_t size_, pos_ = 0;
  std::string source_;
  std::unique_ptr<z_stream_s> zs_;  // null for plain data
  bool stream_ended_ = false;
};

}  // namespace dpcore::data
