#include "engine/data/image/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <filesystem>
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

// One file's outcome: its pixels, or why it has none.
struct Decoded {
  RgbImage image;
  std::optional<std::string> bad;  // a BadImage's message
  std::exception_ptr error;        // anything else (an unreadable file): always fatal
};

// Decodes paths[i] into out[i] on `workers` threads taking the next index as they go: which
// thread decodes a file changes nothing in the result.
void decode_all(const std::vector<std::string>& paths, int workers, std::vector<Decoded>& out) {
  out.assign(paths.size(), Decoded{});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
      try {
        out[i].image = decode_image_file(paths[i]);
      } catch (const BadImage& e) {
        out[i].bad = e.what();
      } catch (...) {
        out[i].error = std::current_exception();
      }
    }
  };
  const size_t threads = std::min(paths.size(), size_t(std::max(1, workers)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace

Dataset load_image_folder(const std::string& dir, const ImageFolderOptions& options, std::string name) {
  const ImageFolderListing listing = list_image_folder(dir);
  std::vector<Decoded> decoded;
  decode_all(listing.paths, options.workers, decoded);

  Dataset d;
  d.name = std::move(name);
  d.c = 3;
  d.num_classes = int64_t(listing.classes.size());
  d.class_names = listing.classes;
  std::vector<size_t> kept;
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (decoded[i].error) std::rethrow_exception(decoded[i].error);
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
  const RgbImage& first = decoded[kept[0]].image;
  for (size_t i : kept) {
    const RgbImage& im = decoded[i].image;
    DPCORE_CHECK(im.h == first.h && im.w == first.w, "imagefolder: ", listing.paths[kept[0]], " is ", first.w, " x ",
                 first.h, " but ", listing.paths[i], " is ", im.w, " x ", im.h,
                 " (width x height): images of different sizes need a --transform with Resize to one size");
  }
  d.n = int64_t(kept.size());
  d.h = first.h;
  d.w = first.w;
  const size_t plane = size_t(d.h * d.w);
  d.images.resize(kept.size() * 3 * plane);
  d.labels.reserve(kept.size());
  for (size_t k = 0; k < kept.size(); ++k) {
    const std::vector<uint8_t>& rgb = decoded[kept[k]].image.pixels;
    float* sample = d.images.data() + k * 3 * plane;
    // HWC bytes to CHW floats; division by 255, exactly what torchvision's ToTensor gives.
    for (size_t p = 0; p < plane; ++p)
      for (size_t ch = 0; ch < 3; ++ch) sample[ch * plane + p] = float(rgb[p * 3 + ch]) / 255.0f;
    d.labels.push_back(listing.labels[kept[k]]);
    std::vector<uint8_t>().swap(decoded[kept[k]].image.pixels);  // the bytes are floats now
  }
  return d;
}

}  // namespace dpcore::data
