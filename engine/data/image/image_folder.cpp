#include "engine/data/image/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "engine/data/image/image_decode.h"
#include "kernels/error.h"

namespace dpcore::data {

namespace fs = std::filesystem;

const std::vector<std::string> kImageExtensions = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                   ".pgm", ".tif",  ".tiff", ".webp"};

static std::string joined_extensions() {
  std::string out;
  for (const std::string& e : kImageExtensions) out += (out.empty() ? "" : ", ") + e;
  return out;
}

bool has_image_extension(const std::string& file_name) {
  std::string lower = file_name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return std::any_of(kImageExtensions.begin(), kImageExtensions.end(), [&](const std::string& e) {
    return lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0;
  });
}

// os.path.join(root, name) for a root that os.walk or the caller gave.
static std::string join(const std::string& root, const std::string& name) {
  return root.empty() || root.back() == '/' ? root + name : root + "/" + name;
}

// DirEntry.is_dir() as Python has it: true for a directory or a link to one.
static bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The names in `dir`, sorted (bytes of UTF-8 sort as Python sorts code points), split into
// folders and the rest, as os.walk splits them.
static void scan(const std::string& dir, std::vector<std::string>& folders, std::vector<std::string>& others) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  DPCORE_CHECK(!ec, "imagefolder: cannot read the folder ", dir, ": ", ec.message());
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    (is_dir(entry.path()) ? folders : others).push_back(name);
  }
  std::sort(folders.begin(), folders.end());
  std::sort(others.begin(), others.end());
}

// Every folder under `root` and `root` itself, as os.walk(root, followlinks=True) visits them.
static void walk(const std::string& root, std::vector<std::string>& roots) {
  roots.push_back(root);
  std::vector<std::string> folders, others;
  scan(root, folders, others);
  for (const std::string& f : folders) walk(join(root, f), roots);
}

ImageFolderListing list_image_folder(const std::string& dir) {
  DPCORE_CHECK(fs::exists(dir), "imagefolder: ", dir, " does not exist");
  DPCORE_CHECK(is_dir(dir), "imagefolder: ", dir, " is not a folder");
  ImageFolderListing out;
  std::vector<std::string> files;
  scan(dir, out.classes, files);
  DPCORE_CHECK(!out.classes.empty(), "imagefolder: ", dir,
               " has no class folders (expected one sub-folder of images per class, DIR/<class>/<image>)");
  std::vector<std::string> empty;
  for (size_t label = 0; label < out.classes.size(); ++label) {
    std::vector<std::string> roots;
    walk(join(dir, out.classes[label]), roots);
    std::sort(roots.begin(), roots.end());  // sorted(os.walk(...)): by the folder's path
    const size_t before = out.paths.size();
    for (const std::string& root : roots) {
      std::vector<std::string> folders, names;
      scan(root, folders, names);
      for (const std::string& name : names)
        if (has_image_extension(name)) {
          out.paths.push_back(join(root, name));
          out.labels.push_back(int64_t(label));
        }
    }
    if (out.paths.size() == before) empty.push_back(join(dir, out.classes[label]));
  }
  if (!empty.empty()) {
    std::string list;
    for (const std::string& e : empty) list += (list.empty() ? "" : ", ") + e;
    fail("imagefolder: no image files in the class folder", empty.size() > 1 ? "s " : " ", list,
         " (the accepted extensions, in any case: ", joined_extensions(), ")");
  }
  return out;
}

namespace {

const TransformSpec& to_tensor_only() {
  static const TransformSpec spec = parse_transform_spec("--transform", "ToTensor()");
  return spec;
}

// Runs work(i) for i in [0, count) on up to `workers` threads taking the next index as they
// go: which thread does an index changes nothing in the result. The first exception (by
// index) is rethrown once all have finished.
void for_each_index(size_t count, int workers, const std::function<void(size_t)>& work) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) try {
        work(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
  };
  const size_t threads = std::min(count, size_t(std::max(1, workers)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// One file's outcome at load: its tensor (kept only for a transform without random steps,
// within the budget), or why it has none.
struct Decoded {
  std::vector<float> tensor;
  Extent extent;
  std::optional<std::string> bad;  // a BadImage's message
};

// Samples decoded and transformed per batch: a random transform's, or a fixed one's whose
// tensors would not fit ImageFolderOptions::kept_image_bytes.
class TransformedFiles : public SampleSource {
 public:
  TransformedFiles(std::vector<std::string> paths, const TransformSpec& transform, Extent extent, int workers)
      : paths_(std::move(paths)), transform_(transform), extent_(extent), workers_(workers) {}
  void load(const int64_t* indices, int64_t count, int64_t epoch, uint64_t seed, float* out) const override {
    const size_t sample = size_t(3 * extent_.h * extent_.w);
    for_each_index(size_t(count), workers_, [&](size_t k) {
      std::vector<float> tensor;
      Extent extent;
      apply_transforms(transform_, decode_image_file(paths_[size_t(indices[k])]), {seed, epoch, indices[k]}, tensor,
                       extent);
      std::memcpy(out + k * sample, tensor.data(), sample * sizeof(float));
    });
  }

 private:
  std::vector<std::string> paths_;
  TransformSpec transform_;
  Extent extent_;
  int workers_;
};

}  // namespace

Dataset load_image_folder(const std::string& dir, const ImageFolderOptions& options, std::string name,
                          const TransformSpec* transform) {
  const ImageFolderListing listing = list_image_folder(dir);
  const TransformSpec& steps = transform ? *transform : to_tensor_only();
  const std::optional<Extent> fixed = steps.output_extent();
  DPCORE_CHECK(!steps.random() || fixed, steps.flag, " \"", steps.text,
               "\": its random steps give images of differing sizes; end the image steps with RandomResizedCrop, "
               "CenterCrop or Resize((h,w)), one size for every image of a batch");
  // The tensors are kept when no draw changes them and they fit the budget; otherwise each
  // batch makes its own (a fixed size is known before any file is decoded).
  const bool per_batch =
      steps.random() || (fixed && int64_t(listing.paths.size()) * 3 * fixed->h * fixed->w * int64_t(sizeof(float)) >
                                      options.kept_image_bytes);
  std::vector<Decoded> decoded(listing.paths.size());
  for_each_index(listing.paths.size(), options.workers, [&](size_t i) {
    try {
      const RgbImage image = decode_image_file(listing.paths[i]);
      if (!per_batch) apply_transforms(steps, image, {}, decoded[i].tensor, decoded[i].extent);
    } catch (const BadImage& e) {
      decoded[i].bad = e.what();
    }
  });

  Dataset d;
  d.name = std::move(name);
  d.c = 3;
  d.num_classes = int64_t(listing.classes.size());
  d.class_names = listing.classes;
  std::vector<size_t> kept;
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (!decoded[i].bad) {
      kept.push_back(i);
    } else if (options.skip_bad_images) {
      d.skipped.push_back(listing.paths[i]);
    } else {
      fail("imagefolder: ", *decoded[i].bad, " (--skip-bad-images leaves such files out)");
    }
  }
  DPCORE_CHECK(!kept.empty(), "imagefolder: ", dir, ": none of its ", decoded.size(),
               " image files decoded (all skipped by --skip-bad-images)");
  d.n = int64_t(kept.size());
  for (size_t i : kept) d.labels.push_back(listing.labels[i]);
  if (per_batch) {
    d.h = fixed->h;
    d.w = fixed->w;
    std::vector<std::string> paths;
    for (size_t i : kept) paths.push_back(listing.paths[i]);
    d.source = std::make_shared<TransformedFiles>(std::move(paths), steps, *fixed, options.workers);
    return d;
  }
  const Extent first = decoded[kept[0]].extent;
  for (size_t i : kept) {
    const Extent& e = decoded[i].extent;
    DPCORE_CHECK(e == first, "imagefolder: ", listing.paths[kept[0]], " is ", first.w, " x ", first.h, " but ",
                 listing.paths[i], " is ", e.w, " x ", e.h,
                 " (width x height, after the transform): images of different sizes need a --transform with "
                 "Resize((h,w)) or a crop to one size");
  }
  d.h = first.h;
  d.w = first.w;
  const size_t sample = size_t(3 * d.h * d.w);
  d.images.resize(kept.size() * sample);
  for (size_t k = 0; k < kept.size(); ++k) {
    std::memcpy(d.images.data() + k * sample, decoded[kept[k]].tensor.data(), sample * sizeof(float));
    std::vector<float>().swap(decoded[kept[k]].tensor);
  }
  return d;
}

}  // namespace dpcore::data
