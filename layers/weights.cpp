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

template <class Half, class Convert>
void convert_half(const io::TensorRecord& t, int64_t n, Convert convert, double* out) {
  const Half* v = t.values<Half>();
  for (int64_t i = 0; i < n; ++i) out[i] = convert(v[i]);
}

// The file's tensor `t` into host[entry.offset...], checking its shape and dtype; `what` says
// what the model calls it ("parameter", "buffer").
template <class Entry>
void read_entry(const io::SafetensorsFile& file, const io::TensorRecord* t, const Entry& e, bool counter,
                const char* what, const WeightsLoading& loading, std::vector<double>& host,
                WeightsConverted& converted) {
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

// The file's tensor prefix + entry.name, which must exist, read as read_entry does.
template <class Entry>
void read_required_entry(const io::SafetensorsFile& file, const std::string& prefix, const Entry& e, bool counter,
                         const char* what, const WeightsLoading& loading, std::vector<double>& host,
                         WeightsConverted& converted) {
  const io::TensorRecord* t = file.find(prefix + e.name);
  DPCORE_CHECK(t != nullptr, file.source(), ": no tensor '", prefix + e.name, "' for the model's ", what, " ", e.name);
  read_entry(file, t, e, counter, what, loading, host, converted);
}

// A flat buffer's values on the host, one double per element: the state a partial load keeps
// where the file has nothing.
std::vector<double> host_values(const Tensor& values) {
  const Tensor host = values.to(Device::cpu());
  if (host.dtype() == DType::Float64) return host.to_vector<double>();
  const std::vector<float> v = host.to_vector<float>();
  return {v.begin(), v.end()};
}

// host (one double per element of a flat buffer, padding zero) into `values` in one copy.
void upload(const std::vector<double>& host, Tensor values) {
  if (values.dtype() == DType::Float64) {
    values.copy_(Tensor::from_vector(host, values.shape()));
  } else {
    values.copy_(Tensor::from_vector(std::vector<float>(host.begin(), host.end()), values.shape()));
  }
}

// Whether the model has a parameter or buffer named `name`.
bool has_tensor(const Model& model, const std::string& name) {
  for (const auto& e : model.parameters().entries())
    if (e.name == name) return true;
  for (const auto& e : model.buffers().entries())
    if (e.name == name) return true;
  return false;
}

// Whether `t`, which is no parameter or buffer of the model, is one of the two tensors Hugging
// Face's BERT files carry besides (its load_state_dict accepts both): a tied alias such as
// cls.predictions.decoder.weight, which must equal the tensor it is tied to, or the buffer
// <...>embeddings.position_ids, which must be int64 [1, P] holding 0..P-1 for the P rows of
// the model's <...>embeddings.position_embeddings.weight. Fails naming it when it is one of
// them but holds anything else. The model calls `t` added + t.name (added: the base model's
// prefix a bare base model's file lacks, load_weights_partially; else empty).
bool hugging_face_extra(const Model& model, const io::SafetensorsFile& file, const io::TensorRecord& t,
                        const std::string& added = "") {
  const std::string name = added + t.name;
  for (const auto& [alias, owner] : model.tied_names()) {
    if (name != alias) continue;
    const io::TensorRecord* tied = file.find(owner.rfind(added, 0) == 0 ? owner.substr(added.size()) : owner);
    DPCORE_CHECK(tied && tied->dtype == t.dtype && tied->shape == t.shape && tied->data == t.data, file.source(),
                 ": tensor '", alias, "' is tied to '", owner, "' but differs from it",
                 tied ? "" : " (the file does not hold it)");
    return true;
  }
  const std::string suffix = "embeddings.position_ids";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string table = name.substr(0, name.size() - suffix.size()) + "embeddings.position_embeddings.weight";
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

// Hugging Face's base_model_prefix for BERT: "bert." when the model's tensors are under it
// (BertForSequenceClassification, BertForMaskedLM) and none of the file's is, so that the
// file is a bare BertModel's (embeddings.*, encoder.*, pooler.*) and from_pretrained reads
// the model's bert.<name> from its <name>; else empty.
std::string bare_base_model_prefix(const Model& model, const io::SafetensorsFile& file) {
  const std::string prefix = "bert.";
  bool model_has = false, file_has = false;
  for (const auto& e : model.parameters().entries()) model_has = model_has || e.name.rfind(prefix, 0) == 0;
  for (const auto& t : file.tensors()) file_has = file_has || t.name.rfind(prefix, 0) == 0;
  return model_has && !file_has ? prefix : "";
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
  for (const auto& e : params.entries())
    read_required_entry(file, prefix, e, false, "parameter", loading, host, converted);
  FlatBuffers& buffers = model.buffers();
  std::vector<double> host_buffers(size_t(buffers.total()), 0.0);
  for (const auto& e : buffers.entries())
    read_required_entry(file, prefix, e, e.counter, "buffer", loading, host_buffers, converted);
  upload(host, params.values());
  if (!buffers.empty()) upload(host_buffers, buffers.values());
  return converted;
}

WeightsConverted load_weights(Model& model, const std::string& path, const WeightsLoading& loading) {
  io::SafetensorsFile file = io::load_safetensors(path);
  for (const auto& t : file.tensors()) {
    DPCORE_CHECK(has_tensor(model, t.name) || hugging_face_extra(model, file, t), path, ": unexpected tensor '", t.name,
                 "' (not a parameter or buffer of this model)");
  }
  return load_weights(model, file, "", loading);
}

WeightsReport load_weights_partially(Model& model, const io::SafetensorsFile& file, const std::string& model_name,
                                     const WeightsLoading& loading) {
  WeightsReport report;
  report.added_prefix = bare_base_model_prefix(model, file);
  const std::string& added = report.added_prefix;
  for (const auto& t : file.tensors())
    if (!has_tensor(model, added + t.name) && !hugging_face_extra(model, file, t, added)) report.unused.push_back(t.name);
  // Each whole flat buffer as the model holds it, the file's tensors over it, then one copy each.
  FlatParameters& params = model.parameters();
  FlatBuffers& buffers = model.buffers();
  std::vector<double> host = host_values(params.values());
  std::vector<double> host_buffers = buffers.empty() ? std::vector<double>() : host_values(buffers.values());
  auto take = [&](const auto& e, bool counter, const char* what, std::vector<double>& into) {
    const bool prefixed = !added.empty() && e.name.rfind(added, 0) == 0;
    const io::TensorRecord* t = file.find(prefixed ? e.name.substr(added.size()) : e.name);
    (t ? report.loaded : report.new_).push_back(e.name);
    if (t) read_entry(file, t, e, counter, what, loading, into, report.converted);
  };
  for (const auto& e : params.entries()) take(e, false, "parameter", host);
  for (const auto& e : buffers.entries()) take(e, e.counter, "buffer", host_buffers);
  DPCORE_CHECK(!report.loaded.empty(), file.source(), ": no tensor of ", model_name,
               " is in it; is it a checkpoint of another model? (its first tensor is '",
               file.tensors().empty() ? std::string("none") : file.tensors().front().name, "', the model's first is '",
               params.entries().empty() ? std::string("none") : params.entries().front().name, "')");
  upload(host, params.values());
  if (!buffers.empty()) upload(host_buffers, buffers.values());
  return report;
}

std::string weights_report_log(const WeightsReport& report, const std::string& source, const std::string& model_name) {
  const size_t of_model = report.loaded.size() + report.new_.size();
  std::string log = source + ": loaded " + std::to_string(report.loaded.size()) + " of the " +
                    std::to_string(of_model) + " tensors of " + model_name + "; " +
                    std::to_string(report.new_.size()) + " newly initialized, " +
                    std::to_string(report.unused.size()) + " of the file's not used\n";
  auto list = [&log](const std::string& what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    log += what;
    for (size_t i = 0; i < names.size(); ++i) log += (i ? ", " : " ") + names[i];
    log += "\n";
  };
  list("  newly initialized (not in the file, so as " + model_name + " starts):", report.new_);
  list("  not used (" + model_name + " has no such tensor):", report.unused);
  list("  loaded:", report.loaded);
  if (!report.added_prefix.empty())
    log += "  (a bare base model's file: its tensors read as " + report.added_prefix +
           "<name>, as from_pretrained reads them)\n";
  return log;
}

}  // namespace dpcore::layers
