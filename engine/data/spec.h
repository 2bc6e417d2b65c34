// The value of the CLI's --data flag, and loading the train and test sets it names:
//   fashion-mnist                 Fashion-MNIST from /usr/share/datasets/fashion-mnist
//   fashion-mnist:DIR             Fashion-MNIST IDX files (raw or .gz) from DIR
//   cifar10:DIR                   CIFAR-10 binary batches from DIR
//   synthetic:C,H,W,CLASSES,N     N learnable random C x H x W samples (test set: N/5)
//   imagefolder:DIR               JPEG and PNG images in torchvision's ImageFolder layout
//                                 (image_folder.h); the test set: --val-data imagefolder:DIR,
//                                 or without it the same images
//   fortunes-lang[:DIR], fortunes-topic[:DIR], text:FILE.tsv, text:DIR
//                                 labelled text (engine/data/text/text_spec.h), tokenized
//                                 with TextOptions' vocabulary into token-id samples
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/data/dataset.h"
#include "engine/data/image/image_folder.h"
#include "engine/data/normalize.h"
#include "engine/data/synthetic.h"

namespace dpcore::data {

// How the texts of a text dataset become token ids (--vocab, --max-len, --truncate).
struct TextOptions {
  std::string vocab;  // vocab.txt; empty: kDefaultVocab
  int64_t max_len = 128;
  bool truncate = false;
};

// The committed vocabulary the tokenizer tests use (tests/fixtures/text/vocab.txt: 3,000
// tokens built from fortunes-lang, docs/text.md).
extern const char* const kDefaultVocab;

struct DataSpec {
  enum class Kind { fashion_mnist, cifar10, synthetic, image_folder, text };
  Kind kind = Kind::fashion_mnist;
  std::string text;          // the flag value as given, for messages
  std::string dir;           // fashion_mnist, cifar10, image_folder
  std::string val_dir;       // image_folder: the test set's folder (--val-data); empty: `dir`'s images
  ImageFolderOptions images; // image_folder: decoding threads, --skip-bad-images, the transform flags
  // image_folder: --transform for the train set and --val-transform for the test set, parsed;
  // unset without --transform (both ToTensor() only, then the train set's statistics).
  std::optional<TransformSpec> transform, val_transform;
  TextOptions text_options;  // text: the tokenizer's settings (`dir` unused; `text` is the flag)
  SyntheticShape shape;      // synthetic
  int64_t n = 0;             // synthetic: train samples
  uint64_t seed = 20240229;  // synthetic: class patterns and samples derive from it
};

// Throws dpcore::Error quoting the flag value and the accepted forms.
DataSpec parse_data_spec(const std::string& value);

// --data and --val-data together (val_data may be empty), with the image folder options and
// the text options: --val-data must be imagefolder:DIR and needs --data imagefolder:DIR, as do
// --transform and --val-transform. Without --val-transform the test set gets ToTensor() and
// --transform's Normalize, if it has one.
DataSpec parse_data_specs(const std::string& data, const std::string& val_data, const ImageFolderOptions& images,
                          const TextOptions& text = {});

Dataset load_split(const DataSpec& spec, Split split);

struct DataSplits {
  Dataset train, test;
  bool normalized = false;
  ChannelStats stats;  // of the train set, applied to both; empty when not normalized
};

// Both splits, checked to agree in sample shape and classes (text: every class of the test
// split is one training saw); with `normalize`, standardised per channel with the train set's
// statistics, otherwise pixels stay in [0, 1]. With --transform the transforms alone say what
// is normalised (their Normalize), as in torchvision.
DataSplits load_data(const DataSpec& spec, bool normalize);

}  // namespace dpcore::data
