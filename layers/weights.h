// A model's state in and out of safetensors files, under PyTorch's state_dict names
// (parameters, then buffers such as batch norm's running statistics), so weights move
// between dpcore and PyTorch unchanged.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "layers/model.h"

namespace dpcore::layers {

// The model's state_dict copied to the host, as views to write: every parameter (float32
// or float64, as the model holds them) and every buffer (counters such as
// num_batches_tracked as int64, as in PyTorch), each named `prefix + name`. The views
// point into this object.
class HostState {
 public:
  explicit HostState(const Model& model, const std::string& prefix = "");
  const std::vector<io::TensorView>& views() const { return views_; }

 private:
  Tensor params_, buffers_;
  std::vector<int64_t> counters_;
  std::vector<io::TensorView> views_;
};

// Writes the model's state_dict, atomically.
void save_weights(const Model& model, const std::string& path, const std::map<std::string, std::string>& metadata = {});

// Whether load_weights may convert bfloat16 and float16 tensors (as PyTorch writes a model
// after .half() or .bfloat16()) to the model's float32 or float64. The conversion is exact,
// but without this a 16-bit file is refused, naming the tensor and its dtype: weights that
// were rounded to 8 or 11 significant bits should not enter a float32 run unannounced.
struct WeightsLoading {
  bool convert_half_precision = false;
};
// How many tensors load_weights converted, by the file's dtype.
struct WeightsConverted {
  int64_t from_bfloat16 = 0, from_float16 = 0;
};
// "converted 12 tensors from bfloat16 to float32\n" for each dtype that had any; empty if none.
std::string conversion_log(const WeightsConverted& converted, DType model_dtype);

// Loads the state_dict strictly, as load_state_dict(strict=True): every parameter and
// buffer of the model must be present with its exact shape, and the file may hold no other
// tensors but the two that Hugging Face's BERT files carry: a tied alias
// (cls.predictions.decoder.weight), equal to the tensor it is tied to, and the buffer
// bert.embeddings.position_ids, 0..P-1 (docs/differences.md). Float32 and float64 files both
// load into either precision, bfloat16 and float16 ones with `loading.convert_half_precision`;
// counters load from int64 (or a float holding a whole number).
WeightsConverted load_weights(Model& model, const std::string& path, const WeightsLoading& loading = {});
// The same from an already-parsed file; tensors are looked up as prefix + name, and only
// those are checked (other tensors in the file are allowed).
WeightsConverted load_weights(Model& model, const io::SafetensorsFile& file, const std::string& prefix,
                              const WeightsLoading& loading = {});

// What load_weights_partially did, in the three lists Hugging Face's from_pretrained reports:
// the model's parameters and buffers taken from the file (`loaded`), the model's that the
// file does not hold, which keep their fresh initialisation (`new_`: "newly initialized"),
// and the file's tensors the model has none of (`unused`: "not used"), each in the model's
// or the file's order.
struct WeightsReport {
  std::vector<std::string> loaded, new_, unused;
  WeightsConverted converted;
  std::string added_prefix;  // "bert." when the file is a bare base model's (see below), else empty
};

// Loads what the file shares with the model, as from_pretrained does to fine-tune (a
// BertForMaskedLM file into a BertForSequenceClassification: bert.* loaded, the pooler and
// classifier.* new, cls.* unused). `model_name` (the --model spec) names the model in errors.
// A tensor the model has with another shape fails naming it and both shapes (as Hugging Face
// does without ignore_mismatched_sizes), dtypes and 16-bit files as in load_weights, and so
// does a file that shares no tensor with the model (a checkpoint of another model). The two
// Hugging Face extras load_weights accepts are checked the same way and not listed as unused.
// As from_pretrained adds the base model's prefix, a bare BertModel's file (no tensor under
// "bert.", e.g. embeddings.word_embeddings.weight) into a model under "bert." reads each
// bert.<name> from <name> (report.added_prefix says so).
WeightsReport load_weights_partially(Model& model, const io::SafetensorsFile& file, const std::string& model_name,
                                     const WeightsLoading& loading = {});

// The report in dpcore's words: a count line, then the new and the unused tensors and the
// loaded ones, each list on a line of its own (left out when empty); `source` is the file.
std::string weights_report_log(const WeightsReport& report, const std::string& source, const std::string& model_name);

}  // namespace dpcore::layers
