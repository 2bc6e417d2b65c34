#include "engine/data/fashion_mnist.h"

#include <filesystem>

#include "kernels/error.h"

namespace dpcore::data {

Dataset idx_dataset(const IdxArray& images, const std::string& images_source, const IdxArray& labels,
                    const std::string& labels_source, int64_t num_classes, std::string name) {
  DPCORE_CHECK(images.dims.size() == 3, images_source, ": images must have 3 dimensions [N, H, W], got ",
               dims_str(images.dims));
  DPCORE_CHECK(labels.dims.size() == 1, labels_source, ": labels must have 1 dimension [N], got ",
               dims_str(labels.dims));
  const int64_t n = images.dims[0];
  DPCORE_CHECK(n == labels.dims[0], images_source, " holds ", n, " images but ", labels_source, " holds ",
               labels.dims[0], " labels");
  DPCORE_CHECK(n > 0, images_source, ": holds no images");
  DPCORE_CHECK(images.dims[1] > 0 && images.dims[2] > 0, images_source, ": empty image size ", dims_str(images.dims));
  for (int64_t i = 0; i < n; ++i)
    DPCORE_CHECK(labels.values[i] < num_classes, labels_source, ": label ", int(labels.values[i]), " at index ", i,
                 " is outside [0, ", num_classes, ")");

  Dataset d;
  d.name = std::move(name);
  d.n = n;
  d.c = 1;
  d.h = images.dims[1];
  d.w = images.dims[2];
  d.num_classes = num_classes;
  d.images.resize(images.values.size());
  // Division rather than multiplication by 1/255: exactly what torchvision's ToTensor gives.
  for (size_t i = 0; i < images.values.size(); ++i) d.images[i] = float(images.values[i]) / 255.0f;
  d.labels.assign(labels.values.begin(), labels.values.end());
  return d;
}

// `dir`/`stem`, or `dir`/`stem`.gz when only that exists.
static std::string find_idx_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  for (const std::string& name : {stem, stem + ".gz"}) {
    fs::path path = fs::path(dir) / name;
    if (fs::exists(path)) return path.string();
  }
  fail("fashion-mnist: neither ", stem, " nor ", stem, ".gz is in ", dir,
       " (install Debian's dataset-fashion-mnist or give the directory that holds the IDX files)");
}

Dataset load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  return idx_dataset(read_idx_file(images_path, 3), images_path, read_idx_file(labels_path, 1), labels_path,
                     kFashionMnistClasses, std::string("fashion-mnist ") + split_name(split));
}

}  // namespace dpcore::data
