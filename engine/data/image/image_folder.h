// A folder of images in torchvision's ImageFolder layout: DIR/<class>/**/<image>, one
// sub-folder per class. The rules are torchvision 0.14's (datasets.folder): the classes are
// DIR's sub-folders sorted by name (class_to_idx gives the i-th index i); a class's files are
// those with an accepted extension (IMG_EXTENSIONS, any case) found walking its folder, in
// the order of sorted(os.walk(class_dir, followlinks=True)) and sorted file names within a
// folder. Images are decoded as PIL's convert("RGB") (image_decode.h), so every sample has 3
// channels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/image/transform_spec.h"

namespace dpcore::data {

// torchvision 0.14's IMG_EXTENSIONS. The decoders read only JPEG and PNG; a file with one of
// the other extensions is listed, as torchvision lists it, and then refused as a format
// dpcore does not decode.
extern const std::vector<std::string> kImageExtensions;
bool has_image_extension(const std::string& file_name);

struct ImageFolderListing {
  std::vector<std::string> classes;  // sorted; class i is index i of class_to_idx
  std::vector<std::string> paths;    // DIR/<class>/..., in torchvision's sample order
  std::vector<int64_t> labels;       // the class of each path
};

// Throws dpcore::Error naming the path for a missing DIR, a DIR without class sub-folders,
// and a class folder without an image file (torchvision's FileNotFoundError cases).
ImageFolderListing list_image_folder(const std::string& dir);

// A transform without random steps makes each image's tensor once, at load, and keeps it
// when the whole set's tensors (float32) take at most this many bytes; a larger set is
// decoded and transformed per batch, as a random transform's is. The seeds' workflow,
// Resize((224, 224)) of Fashion-MNIST's 60,000 images, would keep 36 GB.
constexpr int64_t kKeptImageBytes = int64_t(4) << 30;

struct ImageFolderOptions {
  int workers = 4;               // decoding threads; the result does not depend on it
  bool skip_bad_images = false;  // leave out (and name in Dataset::skipped) files that do not decode
  std::string transform;         // --transform (transform_spec.h); empty: ToTensor() only
  std::string val_transform;     // --val-transform; empty: ToTensor() and --transform's Normalize
  int64_t kept_image_bytes = kKeptImageBytes;  // see above
};

// A Dataset of 3 x H x W samples from the folder's images, each decoded and run through
// `transform` (nullptr: ToTensor(), byte / 255). Every file is decoded at load, on `workers`
// threads: one that does not decode is an error naming it, or with skip_bad_images is left
// out; when nothing is left, that is an error too. With a transform without random steps the
// tensors are made there and kept (unless they would take more than kept_image_bytes); they
// must all have one size (the error names two files of different sizes). With a random
// transform, or a fixed-size one whose tensors would not fit that budget, the pixels are
// dropped and Dataset::source decodes and transforms each batch's files again on `workers`
// threads, so the folder need not fit in memory; the transform must then end its image
// steps with a fixed size (RandomResizedCrop, CenterCrop or Resize((h,w))).
Dataset load_image_folder(const std::string& dir, const ImageFolderOptions& options, std::string name,
                          const TransformSpec* transform = nullptr);

}  // namespace dpcore::data
