// The --transform and --val-transform flags: a torchvision Compose written as its list of
// transforms, e.g.
//   RandomResizedCrop(224),RandomHorizontalFlip(),ToTensor(),Normalize(imagenet)
//   Resize(256),CenterCrop(224),ToTensor(),Normalize(imagenet)
// Grammar: STEP(,STEP)*, STEP = Name(ARG,...), ARG = VALUE or key=VALUE, VALUE = a number, a
// word, or a tuple (n,n,...); spaces are ignored. The steps, with torchvision 0.14's meaning
// (image_transforms.h) and defaults:
//   Resize(size)                        size: n (the shorter side) or (h,w)
//   CenterCrop(size)                    size: n (n x n) or (h,w)
//   RandomResizedCrop(size, scale=(0.08,1), ratio=(0.75,1.3333333333333333))
//   RandomHorizontalFlip(p=0.5)
//   ToTensor()                          required, after the image steps
//   Normalize(imagenet) or Normalize(mean=(r,g,b), std=(r,g,b))   optional, last
// imagenet is torchvision's ImageNet statistics, mean (0.485,0.456,0.406), std (0.229,0.224,0.225).
//
// Random draws: the steps of an image draw from a dpcore::Generator seeded with
// sample_seed(seed, kTransformStream, epoch, index) (engine/random.h), index being the
// image's index in the dataset, in the order of the steps: RandomResizedCrop's (see
// random_resized_crop_box), then the flip's generator.uniform() < p. So an image gets the same
// crop and flip at an epoch whatever the batch, the replica split, the thread or a resume.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_transforms.h"

namespace dpcore::data {

constexpr uint64_t kTransformStream = 0x7472616e73666f72ull;  // "transfor"

struct TransformStep {
  enum class Kind { resize, center_crop, random_resized_crop, random_horizontal_flip, to_tensor, normalize };
  Kind kind = Kind::to_tensor;
  ResizeSize resize;        // resize
  Extent size;              // center_crop, random_resized_crop
  ResizedCropRange range;   // random_resized_crop
  double p = 0.5;           // random_horizontal_flip
  std::array<float, 3> mean{}, std{};  // normalize (float32, as torchvision's tensors)
};

struct TransformSpec {
  std::string flag;  // "--transform" or "--val-transform", for messages
  std::string text;  // the value as given
  std::vector<TransformStep> steps;

  bool random() const;      // draws (RandomResizedCrop, RandomHorizontalFlip)
  bool normalizes() const;  // ends with Normalize
  // The size every image comes out with, when the steps fix it (their last resize or crop is
  // RandomResizedCrop, CenterCrop or Resize((h,w))); nothing when it depends on the image.
  std::optional<Extent> output_extent() const;
};

// Throws dpcore::Error naming the flag, the step and the value for an unknown step or
// argument, a value out of range (sizes of at least 1, 0 < scale and ratio ranges in order,
// p in [0, 1], std > 0), and steps out of order (image steps, ToTensor(), Normalize).
TransformSpec parse_transform_spec(const std::string& flag, const std::string& text);

// The draws of image `index` at `epoch` (0-based).
struct TransformKey {
  uint64_t seed = 0;
  int64_t epoch = 0, index = 0;
};

// Runs the steps on `image`: the 3 x h x w tensor goes to `out` (resized to fit), its size to
// `extent`. No step fails on a decoded image: CenterCrop pads, RandomResizedCrop's boxes lie inside.
void apply_transforms(const TransformSpec& spec, const RgbImage& image, const TransformKey& key,
                      std::vector<float>& out, Extent& extent);

}  // namespace dpcore::data
