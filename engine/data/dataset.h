// The data the trainer consumes, on plain types (no Tensor): N images of C x H x W float32
// pixels, or N token-id sequences of different lengths (text, engine/data/text/token_dataset.h),
// and one int64 class label per sample. The trainer wraps these buffers in tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dpcore::data {

enum class Split { train, test };

inline const char* split_name(Split split) { return split == Split::train ? "train" : "test"; }

// Samples made when a batch needs them, instead of held in Dataset::images: an image folder
// with a random --transform decodes and transforms its files per batch (image/image_folder.h).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Writes samples indices[0..count) as they are at `epoch` (0-based), drawing from `seed`, to
  // `out`: count x sample_size floats. Called by the loader's worker thread.
  virtual void load(const int64_t* indices, int64_t count, int64_t epoch, uint64_t seed, float* out) const = 0;
};

struct Dataset {
  std::string name;  // e.g. "fashion-mnist train"; names the data in messages
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t num_classes = 0;
  std::vector<float> images;    // n*c*h*w values, sample-major NCHW; in [0, 1] until normalised
  std::vector<int64_t> labels;  // n values in [0, num_classes)
  // Per channel, the value a raw pixel of 0 has in `images`: empty while the pixels are raw
  // (the value is 0); normalize() sets (0 - mean_c) / std_c. crop:PAD pads with it (augment.h).
  std::vector<float> zero_value;
  // An image folder's (image_folder.h): the class names in index order, torchvision's
  // class_to_idx; and the files --skip-bad-images left out. Empty for the other datasets.
  std::vector<std::string> class_names;
  std::vector<std::string> skipped;
  // Token-id samples instead of images (then c = h = w = 0 and `images` is empty): sample i
  // is token_ids[token_offsets[i], token_offsets[i + 1]), at most max_len ids, each in
  // [0, vocab_size); the loader pads a batch to its longest sample with pad_id.
  std::vector<int64_t> token_ids, token_offsets;
  int64_t max_len = 0, vocab_size = 0, pad_id = 0;
  // Token ids, for masked-LM (mlm_masking.h): [MASK]'s id (-1 when the vocabulary has none),
  // the ids never masked ([CLS], [SEP], [PAD]) and the vocabulary's file, for messages.
  int64_t mask_id = -1;
  std::vector<int64_t> special_ids;
  std::string vocab;
  // Set when the samples are made per batch (then `images` is empty): only the loader reads them.
  std::shared_ptr<const SampleSource> source;

  bool tokens() const { return !token_offsets.empty(); }
  int64_t length(int64_t i) const { return token_offsets[size_t(i) + 1] - token_offsets[size_t(i)]; }
  const int64_t* ids(int64_t i) const { return token_ids.data() + token_offsets[size_t(i)]; }
  int64_t sample_size() const { return c * h * w; }
  const float* image(int64_t i) const { return images.data() + i * sample_size(); }
  float zero_of_channel(int64_t ch) const { return zero_value.empty() ? 0.0f : zero_value[size_t(ch)]; }
};

// Throws dpcore::Error unless the sizes agree with n, c, h, w (or the token offsets, lengths
// and ids with n, max_len and vocab_size) and every label is a class.
void check_dataset(const Dataset& data);

// "60000 x 1 x 28 x 28, 10 classes"; token ids: "4576 texts of 3 to 128 tokens, 10 classes"
std::string describe(const Dataset& data);

}  // namespace dpcore::data
