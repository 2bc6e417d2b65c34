#include "cli/tokenize_command.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "engine/data/text/text_spec.h"
#include "engine/io/safetensors.h"
#include "kernels/error.h"

namespace dpcore::cli {

void write_tokens(const TokenizeOptions& options, std::ostream& log) {
  DPCORE_CHECK(data::text::is_text_data(options.data), "dpcore tokenize: --data \"", options.data,
               "\" is not a text dataset; expected fortunes-lang, fortunes-topic, text:FILE.tsv or text:DIR");
  const data::DataSpec spec = data::parse_data_specs(options.data, "", {}, options.text);
  const data::DataSplits splits = data::load_data(spec, /*normalize_pixels=*/false);
  const data::Dataset* parts[2] = {&splits.train, &splits.test};
  const char* names[2] = {"train", "test"};
  std::vector<io::TensorView> tensors;
  for (int s = 0; s < 2; ++s) {
    const data::Dataset& d = *parts[s];
    const std::string name = names[s];
    for (const auto& [suffix, v] : {std::pair<const char*, const std::vector<int64_t>*>{".ids", &d.token_ids},
                                    {".offsets", &d.token_offsets},
                                    {".labels", &d.labels}})
      tensors.push_back({name + suffix, DType::Int64, {int64_t(v->size())}, v->data(), v->size() * sizeof(int64_t)});
  }
  const data::Dataset& train = splits.train;
  const std::map<std::string, std::string> metadata = {
      {"classes", nlohmann::json(train.class_names).dump()},
      {"pad_id", std::to_string(train.pad_id)},
      {"vocab_size", std::to_string(train.vocab_size)},
      {"vocab", train.vocab},
      {"data", options.data},
      {"max_len", std::to_string(options.text.max_len)},
  };
  io::save_safetensors(options.out, tensors, metadata);
  for (int s = 0; s < 2; ++s) {
    log << "tokenize: " << parts[s]->name << ": " << parts[s]->n << " texts, " << parts[s]->token_ids.size()
        << " tokens\n";
  }
  log << "tokenize: " << train.num_classes << " classes, vocabulary " << train.vocab << " (" << train.vocab_size
      << " tokens): written to " << options.out << "\n";
}

}  // namespace dpcore::cli
