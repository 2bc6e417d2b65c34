// Reading and validating safetensors files. The header is parsed and checked completely
// before any tensor bytes are touched; the file and memory readers share that code.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/io/safetensors.h"

namespace dpcore::io {
namespace {

using Json = nlohmann::ordered_json;  // keeps the header's key order for ties between empty tensors

// The reference implementation's limit: a longer header means a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor's entry in the header, already checked against its dtype and shape.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte range in the buffer
};

struct Header {
  std::vector<Entry> entries;  // sorted by position in the buffer
  std::map<std::string, std::string> metadata;
};

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Numbers are short; anything else is described by its type so that a hostile header
// cannot blow up an error message.
std::string describe(const Json& v) { return v.is_number() ? v.dump() : std::string("a JSON ") + v.type_name(); }

uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& src) {
  DPCORE_CHECK(file_size >= 8, src, ": not a safetensors file: it has ", file_size,
               " bytes, fewer than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
  DPCORE_CHECK(n <= kMaxHeaderBytes, src, ": header length ", n, " exceeds the limit of ", kMaxHeaderBytes,
               " bytes (corrupt file?)");
  DPCORE_CHECK(n <= file_size - 8, src, ": header length ", n, " runs past the end of the file (", file_size,
               " bytes)");
  return n;
}

// Parses the header text, refusing duplicate keys (JSON parsers silently keep one of them)
// and nesting deeper than a header needs ({"t": {"shape": [...]}} is three levels), which
// bounds the work a hostile header can cause.
Json parse_json(const char* text, size_t n, const std::string& src) {
  std::vector<std::set<std::string>> keys_per_object;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      DPCORE_CHECK(depth < 3, src, ": header nests deeper than a safetensors header can");
      if (event == Event::object_start) keys_per_object.emplace_back();
    } else if (event == Event::object_end) {
      keys_per_object.pop_back();
    } else if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      DPCORE_CHECK(keys_per_object.back().insert(key).second, src, ": header has the key '", key, "' twice");
    }
    return true;
  };
  try {
    return Json::parse(text, text + n, check);
  } catch (const Json::exception& e) {
    fail(src, ": header is not valid JSON: ", e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const Json& v, const std::string& src) {
  DPCORE_CHECK(v.is_object(), src, ": __metadata__ must be an object of strings, got ", describe(v));
  std::map<std::string, std::string> out;
  for (const auto& item : v.items()) {
    DPCORE_CHECK(item.value().is_string(), src, ": __metadata__ entry '", item.key(), "' is ",
                 describe(item.value()), "; only strings are allowed");
    out[item.key()] = item.value().get<std::string>();
  }
  return out;
}

DType parse_dtype(const Json& v, const std::string& where) {
  DPCORE_CHECK(v.is_string(), where, ": dtype must be a string, got ", describe(v));
  const std::string& s = v.get_ref<const std::string&>();
  for (DType t : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::BFloat16, DType::Float16})
    if (s == safetensors_dtype_name(t)) return t;
  static const std::set<std::string> other_format_dtypes = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                                                            "I16",  "U16", "U32", "U64"};
  if (other_format_dtypes.count(s))
    fail(where, ": dtype ", s, " is not supported by dpcore (F32, F64, BF16, F16, I32, I64 are)");
  fail(where, ": unknown dtype '", s, "'");
}

// A non-negative integer that fits in int64 (JSON numbers may be negative, fractional or huge).
uint64_t parse_count(const Json& v, const std::string& where, const char* what) {
  DPCORE_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX), where, ": ", what, " is ",
               describe(v), ", expected a non-negative integer");
  return v.get<uint64_t>();
}

const Json& field(const Json& info, const char* key, const std::string& where) {
  auto it = info.find(key);
  DPCORE_CHECK(it != info.end(), where, ": missing \"", key, "\"");
  return *it;
}

Entry parse_entry(const std::string& name, const Json& info, uint64_t buffer_size, const std::string& src) {
  const std::string where = src + ": tensor '" + name + "'";
  DPCORE_CHECK(info.is_object(), where, ": expected an object with dtype, shape and data_offsets, got ",
               describe(info));
  Entry e{name, parse_dtype(field(info, "dtype", where), where), {}, 0, 0};

  const Json& shape = field(info, "shape", where);
  DPCORE_CHECK(shape.is_array(), where, ": shape must be an array, got ", describe(shape));
  uint64_t nbytes = dtype_size(e.dtype);
  bool overflow = false;
  for (const Json& d : shape) {
    uint64_t size = parse_count(d, where, "a shape entry");
    overflow |= __builtin_mul_overflow(nbytes, size, &nbytes);
    e.shape.push_back(int64_t(size));
  }
  DPCORE_CHECK(!overflow, where, ": shape ", shape_str(e.shape), " is too large to address");

  const Json& offsets = field(info, "data_offsets", where);
  DPCORE_CHECK(offsets.is_array() && offsets.size() == 2, where, ": data_offsets must be [begin, end], got ",
               describe(offsets));
  e.begin = parse_count(offsets[0], where, "data_offsets begin");
  e.end = parse_count(offsets[1], where, "data_offsets end");
  DPCORE_CHECK(e.begin <= e.end, where, ": data_offsets ", offsets_str(e.begin, e.end), " end before they begin");
  DPCORE_CHECK(e.end <= buffer_size, where, ": data_offsets ", offsets_str(e.begin, e.end),
               " run past the end of the ", buffer_size, "-byte data buffer");
  DPCORE_CHECK(e.end - e.begin == nbytes, where, ": shape ", shape_str(e.shape), " of ", safetensors_dtype_name(e.dtype),
               " needs ", nbytes, " bytes but data_offsets ", offsets_str(e.begin, e.end), " hold ", e.end - e.begin);
  return e;
}

// Like the reference implementation, require the tensors to tile the buffer exactly:
// bytes that belong to two tensors or to none mean the file is corrupt.
void sort_and_check_tiling(std::vector<Entry>& entries, uint64_t buffer_size, const std::string& src) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;  // every byte before this belongs to exactly one tensor
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      fail(src, ": tensor '", e.name, "' data_offsets ", offsets_str(e.begin, e.end), " overlap tensor '", prev->name,
           "' data_offsets ", offsets_str(prev->begin, prev->end));
    DPCORE_CHECK(e.begin == covered, src, ": bytes [", covered, ", ", e.begin,
                 ") of the data buffer belong to no tensor (the format allows no gaps)");
    covered = e.end;
    prev = &e;
  }
  DPCORE_CHECK(covered == buffer_size, src, ": the last ", buffer_size - covered, " bytes of the ", buffer_size,
               "-byte data buffer belong to no tensor");
}

Header parse_header(const char* text, size_t n, uint64_t buffer_size, const std::string& src) {
  Json root = parse_json(text, n, src);
  DPCORE_CHECK(root.is_object(), src, ": header must be a JSON object, got ", describe(root));
  Header h;
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__")
      h.metadata = parse_metadata(item.value(), src);
    else
      h.entries.push_back(parse_entry(item.key(), item.value(), buffer_size, src));
  }
  sort_and_check_tiling(h.entries, buffer_size, src);
  return h;
}

TensorRecord empty_record(const Entry& e) {
  return TensorRecord{e.name, e.dtype, e.shape, std::vector<uint8_t>(e.end - e.begin)};
}

// A read-only FILE* that reports short reads with the file's name.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb"), &std::fclose) {
    DPCORE_CHECK(f_, path, ": cannot open: ", std::strerror(errno));
  }
  uint64_t size() const {
    struct stat st;
    DPCORE_CHECK(fstat(fileno(f_.get()), &st) == 0, path_, ": cannot stat: ", std::strerror(errno));
    DPCORE_CHECK(S_ISREG(st.st_mode), path_, ": not a regular file");
    return uint64_t(st.st_size);
  }
  void read(void* dst, size_t n) {
    DPCORE_CHECK(std::fread(dst, 1, n, f_.get()) == n, path_, ": read failed or the file shrank while reading");
  }

 private:
  std::string path_;
  std::unique_ptr<FILE, decltype(&std::fclose)> f_;
};

}  // namespace

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source_name) {
  uint64_t n = header_length(data, size, source_name);
  const uint8_t* buffer = data + 8 + n;
  Header h = parse_header(reinterpret_cast<const char*>(data + 8), n, size - 8 - n, source_name);
  std::vector<TensorRecord> records;
  for (const Entry& e : h.entries) {
    records.push_back(empty_record(e));
    std::copy(buffer + e.begin, buffer + e.end, records.back().data.begin());
  }
  return SafetensorsFile(source_name, std::move(records), std::move(h.metadata));
}

SafetensorsFile load_safetensors(const std::string& path) {
  InputFile file(path);
  uint64_t size = file.size();
  uint8_t first8[8] = {};
  if (size >= 8) file.read(first8, 8);
  uint64_t n = header_length(first8, size, path);
  std::string text(n, '\0');
  file.read(text.data(), n);
  Header h = parse_header(text.data(), n, size - 8 - n, path);
  // The entries tile the buffer in order, so the tensors are read front to back.
  std::vector<TensorRecord> records;
  for (const Entry& e : h.entries) {
    records.push_back(empty_record(e));
    file.read(records.back().data.data(), records.back().data.size());
  }
  return SafetensorsFile(path, std::move(records), std::move(h.metadata));
}

}  // namespace dpcore::io
