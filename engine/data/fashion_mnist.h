// Fashion-MNIST: 28x28 grey images of 10 kinds of clothing, 60000 train and 10000 test, as
// pairs of IDX files (see idx.h), raw or gzip-compressed.
#pragma once

#include <string>

#include "engine/data/dataset.h"
#include "engine/data/idx.h"

namespace dpcore::data {

// Where Debian's dataset-fashion-mnist package puts the (gzip-compressed) files.
inline const char* const kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kFashionMnistClasses = 10;

// Pairs an IDX images array [N, H, W] with an IDX labels array [N] into a one-channel
// dataset, pixels scaled from 0..255 to [0, 1]. The sources name the files in errors:
// different counts, labels outside [0, num_classes), no samples at all.
Dataset idx_dataset(const IdxArray& images, const std::string& images_source, const IdxArray& labels,
                    const std::string& labels_source, int64_t num_classes, std::string name);

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from `dir`, each either as named or with
// a .gz suffix (the Debian package ships the .gz names).
Dataset load_fashion_mnist(const std::string& dir, Split split);

}  // namespace dpcore::data
