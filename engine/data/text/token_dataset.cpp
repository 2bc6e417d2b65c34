#include "engine/data/text/token_dataset.h"

#include "kernels/error.h"

namespace dpcore::data::text {

Dataset tokenize_dataset(const TextDataset& texts, const WordPieceTokenizer& tokenizer, int64_t max_len,
                         bool truncate) {
  check_text_dataset(texts);
  Dataset d;
  d.name = texts.name;
  d.n = int64_t(texts.texts.size());
  d.num_classes = int64_t(texts.class_names.size());
  d.class_names = texts.class_names;
  d.labels = texts.labels;
  d.max_len = max_len;
  d.vocab_size = tokenizer.vocab().size();
  d.pad_id = tokenizer.vocab().required_id(kPadToken);
  d.mask_id = tokenizer.vocab().id_of(kMaskToken);
  d.special_ids = {tokenizer.vocab().required_id(kClsToken), tokenizer.vocab().required_id(kSepToken), d.pad_id};
  d.vocab = tokenizer.vocab().source();
  d.token_offsets.reserve(size_t(d.n) + 1);
  d.token_offsets.push_back(0);
  for (size_t i = 0; i < texts.texts.size(); ++i) {
    std::vector<int64_t> ids;
    try {
      ids = tokenizer.encode(texts.texts[i], max_len, truncate);
    } catch (const Error& e) {
      const std::string& source = i < texts.sources.size() ? texts.sources[i] : texts.name + " text " + std::to_string(i);
      fail(source, ": ", e.what());
    }
    d.token_ids.insert(d.token_ids.end(), ids.begin(), ids.end());
    d.token_offsets.push_back(int64_t(d.token_ids.size()));
  }
  check_dataset(d);
  return d;
}

}  // namespace dpcore::data::text
