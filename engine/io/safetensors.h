// The safetensors format, in which PyTorch users exchange weights:
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    UTF-8 JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
//              optionally "__metadata__": {"key": "value", ...}}
//   the rest   the byte buffer; offsets are relative to its start, data is little-endian
//              and row-major.
// The reader validates everything the reference implementation (huggingface/safetensors)
// does: tensors must tile the buffer exactly (no gaps, no overlaps, nothing left over) and
// each tensor's byte range must match its shape and dtype. Errors name the file and the
// problem. The API uses plain types so that it does not depend on Tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/dtype.h"
#include "kernels/error.h"

namespace dpcore::io {

// A tensor to write. The bytes are borrowed, not copied; they must stay alive during the save.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};

// A tensor read from a file; owns its bytes.
struct TensorRecord {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const { return int64_t(data.size() / dtype_size(dtype)); }

  // The elements as T; fails when T is not the stored dtype (no silent conversions).
  template <class T>
  const T* values() const {
    DPCORE_CHECK(dtype_of<T>::value == dtype, "safetensors: tensor '", name, "' holds ", dtype_name(dtype),
                 ", not ", dtype_name(dtype_of<T>::value));
    return reinterpret_cast<const T*>(data.data());
  }
};

class SafetensorsFile {
 public:
  SafetensorsFile(std::string source, std::vector<TensorRecord> tensors, std::map<std::string, std::string> metadata)
      : source_(std::move(source)), tensors_(std::move(tensors)), metadata_(std::move(metadata)) {}

  // The file name (or the name given to parse_safetensors), used in error messages.
  const std::string& source() const { return source_; }
  // In the order of their bytes in the buffer (which is the order save_safetensors was given).
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;
  // nullptr when absent.
  const TensorRecord* find(const std::string& name) const;
  // Fails naming the file and the missing tensor.
  const TensorRecord& at(const std::string& name) const;
  // The "__metadata__" string map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string source_;
  std::vector<TensorRecord> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes the tensors in the given order, with an 8-byte aligned header padded with spaces
// like the reference writer. The file appears atomically (temporary file, fsync, rename).
// Fails on duplicate names, a byte count that does not match shape and dtype, or I/O errors.
void save_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file. The header length is checked against the file size
// before anything is allocated, so a corrupt file cannot cause a huge allocation.
SafetensorsFile load_safetensors(const std::string& path);

// The same validation on an in-memory file image; source_name is used in error messages.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source_name);

// "F32", "F64", "I32", "I64", "BF16", "F16" (the names PyTorch's safetensors writes).
const char* safetensors_dtype_name(DType dtype);

}  // namespace dpcore::io
