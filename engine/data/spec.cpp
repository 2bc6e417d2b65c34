#include "engine/data/spec.h"

#include <algorithm>
#include <vector>

#include "engine/data/cifar10.h"
#include "engine/data/flag_text.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/text/text_spec.h"
#include "engine/data/text/token_dataset.h"
#include "engine/random.h"
#include "kernels/error.h"

namespace dpcore::data {

const char* const kDefaultVocab = DPCORE_DEFAULT_VOCAB;

static const char* const kForms =
    "expected fashion-mnist, fashion-mnist:DIR, cifar10:DIR, synthetic:C,H,W,CLASSES,N, imagefolder:DIR, "
    "fortunes-lang, fortunes-topic, text:FILE.tsv or text:DIR";

static int64_t parse_positive(const std::string& field, const char* what, const std::string& value) {
  std::optional<int64_t> v = positive_integer(field);
  DPCORE_CHECK(v.has_value(), "--data \"", value, "\": ", what, " \"", field,
               "\" is not a positive integer (synthetic:C,H,W,CLASSES,N)");
  return *v;
}

static DataSpec parse_synthetic(const std::string& fields, const std::string& value) {
  std::vector<std::string> parts = split_commas(fields);
  DPCORE_CHECK(parts.size() == 5, "--data \"", value, "\": synthetic takes 5 numbers C,H,W,CLASSES,N, got ",
               parts.size());
  DataSpec spec;
  spec.kind = DataSpec::Kind::synthetic;
  spec.shape.c = parse_positive(parts[0], "C", value);
  spec.shape.h = parse_positive(parts[1], "H", value);
  spec.shape.w = parse_positive(parts[2], "W", value);
  spec.shape.classes = parse_positive(parts[3], "CLASSES", value);
  spec.n = parse_positive(parts[4], "N", value);
  DPCORE_CHECK(spec.shape.classes >= 2, "--data \"", value, "\": CLASSES must be at least 2");
  return spec;
}

DataSpec parse_data_spec(const std::string& value) {
  const size_t colon = value.find(':');
  const std::string kind = value.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? value.substr(colon + 1) : "";
  DataSpec spec;
  if (kind == "fashion-mnist") {
    DPCORE_CHECK(!has_arg || !arg.empty(), "--data \"", value, "\": empty directory after \"fashion-mnist:\"");
    spec.kind = DataSpec::Kind::fashion_mnist;
    spec.dir = has_arg ? arg : kFashionMnistDir;
  } else if (kind == "cifar10") {
    DPCORE_CHECK(!arg.empty(), "--data \"", value, "\": cifar10 needs a directory, cifar10:DIR");
    spec.kind = DataSpec::Kind::cifar10;
    spec.dir = arg;
  } else if (kind == "imagefolder") {
    DPCORE_CHECK(!arg.empty(), "--data \"", value, "\": imagefolder needs a directory, imagefolder:DIR");
    spec.kind = DataSpec::Kind::image_folder;
    spec.dir = arg;
  } else if (text::is_text_data(value)) {
    spec.kind = DataSpec::Kind::text;
  } else if (kind == "synthetic") {
    DPCORE_CHECK(has_arg, "--data \"", value, "\": synthetic needs its sizes, synthetic:C,H,W,CLASSES,N");
    spec = parse_synthetic(arg, value);
  } else {
    fail("--data \"", value, "\": unknown dataset \"", kind, "\"; ", kForms);
  }
  spec.text = value;
  return spec;
}

DataSpec parse_data_specs(const std::string& data, const std::string& val_data, const ImageFolderOptions& images,
                          const TextOptions& text) {
  DataSpec spec = parse_data_spec(data);
  spec.images = images;
  spec.text_options = text;
  for (const std::string* flag : {&images.transform, &images.val_transform})
    DPCORE_CHECK(flag->empty() || spec.kind == DataSpec::Kind::image_folder,
                 flag == &images.transform ? "--transform" : "--val-transform", " \"", *flag,
                 "\" needs --data imagefolder:DIR (--data \"", data, "\" is not images)");
  if (!images.transform.empty() || !images.val_transform.empty()) {
    spec.transform = parse_transform_spec("--transform", images.transform.empty() ? "ToTensor()" : images.transform);
    if (!images.val_transform.empty()) {
      spec.val_transform = parse_transform_spec("--val-transform", images.val_transform);
    } else {
      spec.val_transform = parse_transform_spec("--val-transform", "ToTensor()");
      if (spec.transform->normalizes()) spec.val_transform->steps.push_back(spec.transform->steps.back());
    }
  }
  if (val_data.empty()) return spec;
  const std::string prefix = "imagefolder:";
  DPCORE_CHECK(val_data.compare(0, prefix.size(), prefix) == 0 && val_data.size() > prefix.size(), "--val-data \"",
               val_data, "\": expected imagefolder:DIR");
  DPCORE_CHECK(spec.kind == DataSpec::Kind::image_folder, "--val-data \"", val_data, "\" needs --data imagefolder:DIR (--data \"",
               data, "\" has a test set of its own)");
  spec.val_dir = val_data.substr(prefix.size());
  return spec;
}

// A text split tokenized with --vocab's tokenizer into [CLS] ... [SEP] ids.
static Dataset tokenized(const DataSpec& spec, const text::WordPieceTokenizer& tokenizer,
                         const text::TextDataset& texts) {
  const TextOptions& t = spec.text_options;
  DPCORE_CHECK(t.max_len >= 2, "--max-len ", t.max_len, ": must be at least 2 ([CLS] and [SEP])");
  return text::tokenize_dataset(texts, tokenizer, t.max_len, t.truncate);
}

static text::WordPieceTokenizer text_tokenizer(const DataSpec& spec) {
  const std::string& vocab = spec.text_options.vocab;
  return text::WordPieceTokenizer(text::Vocab::read(vocab.empty() ? kDefaultVocab : vocab));
}

Dataset load_split(const DataSpec& spec, Split split) {
  switch (spec.kind) {
    case DataSpec::Kind::fashion_mnist:
      return load_fashion_mnist(spec.dir, split);
    case DataSpec::Kind::cifar10:
      return load_cifar10(spec.dir, split);
    case DataSpec::Kind::image_folder: {
      const bool test = split == Split::test;
      const std::string& dir = test && !spec.val_dir.empty() ? spec.val_dir : spec.dir;
      const std::optional<TransformSpec>& transform = test ? spec.val_transform : spec.transform;
      return load_image_folder(dir, spec.images, "imagefolder " + dir, transform ? &*transform : nullptr);
    }
    case DataSpec::Kind::text:
      return tokenized(spec, text_tokenizer(spec), text::load_text_split(spec.text, split));
    case DataSpec::Kind::synthetic: {
      // Both splits share the class patterns (stream 0) and draw their samples from
      // different streams, so the test set measures generalisation, not memory.
      const bool train = split == Split::train;
      const int64_t n = train ? spec.n : std::max<int64_t>(1, spec.n / 5);
      return make_synthetic(spec.shape, n, derive_seed(spec.seed, 0), derive_seed(spec.seed, train ? 1 : 2),
                            std::string("synthetic ") + split_name(split));
    }
  }
  fail("--data \"", spec.text, "\": invalid dataset kind ", int(spec.kind));
}

// Every class the test split holds must have training samples: a model never shown a class
// cannot be measured on it.
static void check_test_classes_trained(const Dataset& train, const Dataset& test, const std::string& flag) {
  std::vector<char> trained(size_t(train.num_classes), 0);
  for (int64_t label : train.labels) trained[size_t(label)] = 1;
  for (int64_t i = 0; i < test.n; ++i) {
    const int64_t label = test.labels[size_t(i)];
    DPCORE_CHECK(trained[size_t(label)], "--data \"", flag, "\": the test split's text ", i, " has label \"",
                 test.class_names[size_t(label)], "\", which no text of the train split has");
  }
}

DataSplits load_data(const DataSpec& spec, bool normalize_pixels) {
  DataSplits s;
  if (spec.kind == DataSpec::Kind::text) {
    // Both splits from one reading of the texts and of the vocabulary.
    const std::vector<text::LabelledText> items = text::read_labelled_texts(spec.text);
    const text::WordPieceTokenizer tokenizer = text_tokenizer(spec);
    for (Split split : {Split::train, Split::test}) {
      const std::string name = spec.text + " " + split_name(split);
      (split == Split::train ? s.train : s.test) = tokenized(spec, tokenizer, text::make_text_dataset(name, items, split));
    }
  } else {
    s.train = load_split(spec, Split::train);
    // An image folder without --val-data or --transform is its own test set: decoded once.
    const bool same_images = spec.kind == DataSpec::Kind::image_folder && spec.val_dir.empty() && !spec.transform;
    s.test = same_images ? s.train : load_split(spec, Split::test);
  }
  if (spec.kind == DataSpec::Kind::image_folder && spec.val_dir.empty())
    s.test.name += " (the test set too: no --val-data)";
  DPCORE_CHECK(s.train.c == s.test.c && s.train.h == s.test.h && s.train.w == s.test.w &&
                   s.train.num_classes == s.test.num_classes,
               "--data \"", spec.text, "\": train (", describe(s.train), ") and test (", describe(s.test),
               ") differ in sample shape or classes");
  DPCORE_CHECK(s.train.class_names == s.test.class_names, "--val-data imagefolder:", spec.val_dir,
               ": its class folders differ from those of --data \"", spec.text,
               "\" (the same class names are needed, so that an index means one class in both)");
  if (spec.kind == DataSpec::Kind::text) {
    check_test_classes_trained(s.train, s.test, spec.text);
    return s;  // token ids: nothing to normalise
  }
  if (normalize_pixels && !spec.transform) {
    s.stats = channel_stats(s.train);
    normalize(s.train, s.stats);
    normalize(s.test, s.stats);
    s.normalized = true;
  }
  return s;
}

}  // namespace dpcore::data
