// Training-time data augmentation, applied by the loader's worker thread while it copies
// each sample into its batch buffer (engine/data/loader.h): one copy, no extra pass.
//
// The --augment flag: none, or a comma-separated list of
//   crop:PAD   torchvision.transforms.RandomCrop(size=(H, W), padding=PAD) (fill 0, constant)
//   flip       torchvision.transforms.RandomHorizontalFlip(p=0.5)
// applied in that order whatever the order in the flag, i.e. Compose([RandomCrop(...),
// RandomHorizontalFlip()]) on the raw image, before transforms.Normalize.
//
// crop:PAD pads every side of the H x W image with PAD pixels of raw value 0 and cuts an
// H x W window at offset (dy, dx), each drawn uniformly from [0, 2*PAD]: output pixel
// (i, j) reads padded pixel (i + dy, j + dx), i.e. image pixel (i + dy - PAD, j + dx - PAD)
// or 0 outside the image. dpcore normalises the whole dataset once when it is loaded, so
// the padding written into the normalised data is the normalised value of a raw 0 pixel,
// (0 - mean_c) / std_c per channel (Dataset::zero_value), and plain 0 with --no-normalize:
// the same numbers PyTorch's RandomCrop-then-Normalize gives. PAD must be smaller than H
// and W, so that every crop keeps part of the image. flip reverses the W axis with
// probability 1/2.
//
// Random draws. The draws of a sample depend only on (seed, epoch, position of the sample in
// the epoch's order), never on the batch size, prefetch depth or thread timing: a
// std::mt19937_64 seeded with sample_seed(seed, kAugmentStream, epoch, position)
// (engine/random.h) gives, in this order, dy = uniform_below(rng, 2*PAD+1)
// and dx = uniform_below(rng, 2*PAD+1) when cropping, then flip = uniform_below(rng, 2) == 1
// when flipping. A loader resumed at a checkpoint's position (seek) therefore produces
// exactly the augmented batches of an uninterrupted run. The generator's output and these
// steps are fixed, so the draws are the same on every platform (PyTorch's are not these).
//
// Evaluation never goes through the loader and is never augmented.
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/dataset.h"

namespace dpcore::data {

struct Augment {
  int64_t crop_pad = 0;  // crop:PAD; 0: no crop
  bool flip = false;
  std::string text = "none";  // the flag value as given, for messages

  bool none() const { return crop_pad == 0 && !flip; }
};

// The stream of derive_seed(seed, .) the augmentation draws come from; the epochs' shuffles
// use derive_seed(seed, epoch) directly.
constexpr uint64_t kAugmentStream = 0x6175676d656e74ull;  // "augment"

// Throws dpcore::Error naming --augment and the text for anything but the forms above (an
// unknown word, crop without a positive integer PAD, an item given twice, none with others).
Augment parse_augment(const std::string& value);

// The canonical form: "none", "crop:4", "flip" or "crop:4,flip" (crop first, as applied).
std::string describe(const Augment& augment);

// Throws dpcore::Error naming --augment unless PAD is smaller than the data's H and W.
void check_augment(const Augment& augment, const Dataset& data);

// The random choices for one sample: crop offset in [0, 2*PAD] (0 without crop) and flip.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};

// The draws of the sample at `position` (0-based, in the epoch's sample order) of `epoch`.
AugmentDraw draw_augment(const Augment& augment, uint64_t seed, int64_t epoch, int64_t position);

// Writes the augmented c x h x w sample `in` to `out` (no overlap): output pixel (ch, i, j)
// is padded pixel (ch, i + dy, j' + dx) with j' = w - 1 - j when flipping, else j, where the
// padded image is `in` surrounded by `pad` pixels of value fill[ch] on every side. Rows are
// copied with memcpy (reversed with std::reverse_copy when flipping).
void augment_sample(const float* in, float* out, int64_t c, int64_t h, int64_t w, int64_t pad,
                    const AugmentDraw& draw, const float* fill);

}  // namespace dpcore::data
