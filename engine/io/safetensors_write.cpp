// Writing safetensors files: the header as the reference writer formats it (compact JSON,
// "__metadata__" first, padded with spaces to a multiple of 8 bytes so the buffer, and
// with it every tensor of 8-byte elements, stays aligned), then the tensors' bytes.
#include <nlohmann/json.hpp>
#include <set>

#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors stores little-endian data; this writer "
                                                         "copies host memory as is");

namespace dpcore::io {
namespace {

using Json = nlohmann::ordered_json;

void check_views(const std::string& path, const std::vector<TensorView>& tensors) {
  std::set<std::string> seen;
  for (const TensorView& t : tensors) {
    const std::string where = "save_safetensors: " + path + ": tensor '" + t.name + "'";
    DPCORE_CHECK(t.name != "__metadata__", where, ": the name is reserved for the metadata");
    DPCORE_CHECK(seen.insert(t.name).second, where, " appears twice");
    uint64_t nbytes = dtype_size(t.dtype);
    bool overflow = false;
    for (int64_t d : t.shape) {
      DPCORE_CHECK(d >= 0, where, ": shape ", shape_str(t.shape), " has a negative size");
      overflow |= __builtin_mul_overflow(nbytes, uint64_t(d), &nbytes);
    }
    DPCORE_CHECK(!overflow && nbytes == t.bytes, where, ": shape ", shape_str(t.shape), " of ", dtype_name(t.dtype),
                 " needs ", overflow ? std::string("more than 2^64") : std::to_string(nbytes), " bytes, but ",
                 t.bytes, " were given");
    DPCORE_CHECK(t.data || t.bytes == 0, where, ": data is null");
  }
}

std::string header_text(const std::string& path, const std::vector<TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  Json root = Json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    Json info = Json::object();
    info["dtype"] = safetensors_dtype_name(t.dtype);
    info["shape"] = t.shape;
    info["data_offsets"] = {offset, offset + t.bytes};
    root[t.name] = std::move(info);
    offset += t.bytes;
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const Json::exception& e) {  // names and metadata must be valid UTF-8
    fail("save_safetensors: ", path, ": ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_views(path, tensors);
  const std::string header = header_text(path, tensors, metadata);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(header.size()) >> (8 * i));

  AtomicFileWriter out(path, "save_safetensors");
  out.write(length, 8);
  out.write(header.data(), header.size());
  for (const TensorView& t : tensors) out.write(t.data, t.bytes);
  out.commit();
}

}  // namespace dpcore::io
