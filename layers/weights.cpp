#include "layers/weights.h"

#include <cmath>

namespace dpcore::layers {

HostState::HostState(const Model& model, const std::string& prefix)
    : params_(model.parameters().values().to(Device::cpu())) {
  const DType dtype = params_.dtype();
  const size_t esize = dtype_size(dtype);
  for (const auto& e : model.parameters().entries()) {
    views_.push_back({prefix + e.name, dtype, e.shape, static_cast<const char*>(params_.raw_data()) + size_t(e.offset) * esize,
                      size_t(e.numel) * esize});
  }
  const FlatBuffers& buffers = model.buffers();
  if (buffers.empty()) return;
  buffers_ = buffers.values().to(Device::cpu());
  // Counters go to int64 in counters_, sized first so that the views into it stay valid.
  size_t counter_values = 0;
  for (const auto& e : buffers.entries()) counter_values += e.counter ? size_t(e.numel) : 0;
  counters_.reserve(counter_values);
  for (const auto& e : buffers.entries()) {
    if (!e.counter) {
      views_.push_back({prefix + e.name, dtype, e.shape,
                        static_cast<const char*>(buffers_.raw_data()) + size_t(e.offset) * esize, size_t(e.numel) * esize});
      continue;
    }
    const size_t first = counters_.size();
    for (int64_t i = 0; i < e.numel; ++i) {
      const size_t at = size_t(e.offset + i);
      counters_.push_back(dtype == DType::Float64 ? int64_t(buffers_.data<double>()[at])
                                                  : int64_t(buffers_.data<float>()[at]));
    }
    views_.push_back({prefix + e.name, DType::Int64, e.shape, counters_.data() + first, size_t(e.numel) * sizeof(int64_t)});
  }
}

void save_weights(const Model& model, const std::string& path, const std::map<std::string, std::string>& metadata) {
  io::save_safetensors(path, HostState(model).views(), metadata);
}

namespace {

// The file's tensor prefix + entry.name into host[entry.offset...], checking its shape;
// `what` says what the model calls it ("parameter", "buffer").
template <class Half, class Convert>
void convert_half(const io::TensorRecord& t, int64_t n, Convert convert, double* out) {
  const Half* v = t.values<Half>();
  for (int64_t i = 0; i < n; ++i) out[i] = convert(v[i]);
}

template <class Entry>
void read_entry(const io::SafetensorsFile& file, const std::string& prefix, const Entry& e, bool counter,
                const char* what, const WeightsLoading& loading, std::vector<double>& host,
                WeightsConverted& converted) {
  const io::TensorRecord* t = file.find(prefix + e.name);
  DPCORE_CHECK(t != nullptr, file.source(), ": no tensor '", prefix + e.name, "' for the model's ", what, " ", e.name);
  DPCORE_CHECK(t->shape == e.shape, file.source(), ": tensor '", t->name, "' has shape ", shape_str(t->shape),
               " but the model's ", e.name, " is ", shape_str(e.shape));
  DPCORE_CHECK(!is_half_precision(t->dtype) || loading.convert_half_precision, file.source(), ": tensor '", t->name,
               "' is ", dtype_name(t->dtype), ", the model's ", what, " ", e.name,
               " is not: a 16-bit file loads only converted, when asked (dpcore's --convert-weights, "
               "WeightsLoading::convert_half_precision)");
  double* out = host.data() + e.offset;
  if (t->dtype == DType::Float32) {
    std::copy(t->values<float>(), t->values<float>() + e.numel, out);
  } else if (t->dtype == DType::Float64) {
    std::copy(t->values<double>(), t->values<double>() + e.numel, out);
  } else if (t->dtype == DType::BFloat16) {
    convert_half<kernels::BFloat16>(*t, e.numel, kernels::bfloat16_to_float, out);
    ++converted.from_bfloat16;
  } else if (t->dtype == DType::Float16) {
    convert_half<kernels::Float16>(*t, e.numel, kernels::float16_to_float, out);
    ++converted.from_float16;
  } else if (t->dtype == DType::Int64 && counter) {
    std::copy(t->values<int64_t>(), t->values<int64_t>() + e.numel, out);
  } else {
    fail(file.source(), ": tensor '", t->name, "' is ", dtype_name(t->dtype), "; the model's ", what, " ", e.name,
         " must be ", counter ? "I64, F32 or F64" : "F32 or F64 (or BF16, F16 converted)");
  }
  for (int64_t i = 0; i < e.numel; ++i) {
    DPCORE_CHECK(!counter || (out[i] >= 0 && out[i] == std::floor(out[i])), file.source(), ": tensor '", t->name,
                 "' is a count but holds ", out[i]);
  }
}

// host (one double per element of a flat buffer, padding zero) into `values` in one copy.
void upload(const std::vector<double>& host, Tensor values) {
  if (values.dtype() == DType::Float64) {
    values.copy_(Tensor::from_vector(host, values.shape()));
  } else {
    values.copy_(Tensor::from_vector(std::vector<float>(host.begin(), host.end()), values.shape()));
  }
}

// Whether `t`, which is no parameter or buffer of the model, is one of the two tensors Hugging
// Face's BERT files carry besides (its load_state_dict accepts both): a tied alias such as
// cls.predictions.decoder.weight, which must equal the tensor it is tied to, or the buffer
// <...>embeddings.position_ids, which must be int64 [1, P] holding 0..P-1 for the P rows of
// the model's <...>embeddings.position_embeddings.weight. Fails naming it when it is one of
// them but holds anything else.
bool hugging_face_extra(const Model& model, const io::SafetensorsFile& file, const io::TensorRecord& t) {
  for (const auto& [alias, owner] : model.tied_names()) {
    if (t.name != alias) continue;
    const io::TensorRecord* tied = file.find(owner);
    DPCORE_CHECK(tied && tied->dtype == t.dtype && tied->shape == t.shape && tied->data == t.data, file.source(),
                 ": tensor '", alias, "' is tied to '", owner, "' but differs from it",
                 tied ? "" : " (the file does not hold it)");
    return true;
  }
  const std::string suffix = "embeddings.position_ids";
  if (t.name.size() < suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string table = t.name.substr(0, t.name.size() - suffix.size()) + "embeddings.position_embeddings.weight";
  for (const auto& e : model.parameters().entries()) {
    if (e.name != table) continue;
    const int64_t positions = e.shape[0];
    bool counts_up = t.dtype == DType::Int64 && t.shape == std::vector<int64_t>{1, positions};
    for (int64_t i = 0; counts_up && i < positions; ++i) counts_up = t.values<int64_t>()[i] == i;
    DPCORE_CHECK(counts_up, file.source(), ": tensor '", t.name, "' must be int64 [1, ", positions, "] holding 0..",
                 positions - 1, " (the positions of ", table, "), got ", dtype_name(t.dtype), " ", shape_str(t.shape));
    return true;
  }
  return false;
}

}  // namespace

std::string conversion_log(const WeightsConverted& converted, DType model_dtype) {
  std::string log;
  for (auto [n, from] : {std::pair{converted.from_bfloat16, "bfloat16"}, std::pair{converted.from_float16, "float16"}})
    if (n > 0)
      log += "converted " + std::to_string(n) + (n == 1 ? " tensor" : " tensors") + " from " + from + " to " +
             dtype_name(model_dtype) + "\n";
  return log;
}

WeightsConverted load_weights(Model& model, const io::SafetensorsFile& file, const std::string& prefix,
                              const WeightsLoading& loading) {
  // Assemble each whole flat buffer on the host (padding stays zero), then one copy each.
  WeightsConverted converted;
  FlatParameters& params = model.parameters();
  std::vector<double> host(size_t(params.total()), 0.0);
  for (const auto& e : params.entries()) read_entry(file, prefix, e, false, "parameter", loading, host, converted);
  FlatBuffers& buffers = model.buffers();
  std::vector<double> host_buffers(size_t(buffers.total()), 0.0);
  for (const auto& e : buffers.entries())
    read_entry(file, prefix, e, e.counter, "buffer", loading, host_buffers, converted);
  upload(host, params.values());
  if (!buffers.empty()) upload(host_buffers, buffers.values());
  return converted;
}

WeightsConverted load_weights(Model& model, const std::string& path, const WeightsLoading& loading) {
  io::SafetensorsFile file = io::load_safetensors(path);
  for (const auto& t : file.tensors()) {
    bool known = false;
    for (const auto& e : model.parameters().entries()) known = known || e.name == t.name;
    for (const auto& e : model.buffers().entries()) known = known || e.name == t.name;
    DPCORE_CHECK(known || hugging_face_extra(model, file, t), path, ": unexpected tensor '", t.name,
                 "' (not a parameter or buffer of this model)");
  }
  return load_weights(model, file, "", loading);
}

}  // namespace dpcore::layers
