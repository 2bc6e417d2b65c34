// ImageFolder (engine/data/image/image_folder.h): the listing against torchvision 0.14's
// datasets.ImageFolder on a tree with every ordering rule in it, the decoded dataset, its
// independence of the thread count, and every bad-input error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_folder.h"
#include "engine/data/image/transform_spec.h"
#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/fixtures/images/" + name; }

// Creates `root`/`relative` (and its folders): a copy of the fixture `from`, or empty.
void put(const std::string& root, const std::string& relative, const std::string& from = "") {
  const fs::path path = fs::path(root) / relative;
  fs::create_directories(path.parent_path());
  if (from.empty())
    std::ofstream(path).put('\n');
  else
    fs::copy_file(fixture(from), path);
}

TEST(ImageFolder, ListingIsTorchvisionImageFolders) {
  if (!testing::python_can_import("torchvision"))
    GTEST_SKIP() << testing::kTorchPython << " cannot import torchvision (Debian package python3-torchvision)";
  testing::TempDir dir;
  const std::string root = dir.file("tree");
  // Names that sort differently by bytes, by case and by separator; files at several depths,
  // extensions in any case, files that are not images, a hidden class folder (torchvision
  // takes it as a class), a file beside the classes, and a link to a folder (followed).
  for (const char* f : {"a/x.JPG", "a/y.jpeg", "a/z.txt", "a/1.png", "a/10.png", "a/2.png", "a/sub/q.png",
                        "a/sub-dir/r.png", "a/sub/deeper/s.png", "a/sub.png", "a/.dot.png", "a/noext", "a/B.webp",
                        "b/img.png", "A/IMG.PNG", "a-b/p.tif", "a.b/p.bmp", ".hidden/h.jpg", "c d/e f.png",
                        "\xc3\xbc/u.ppm", "b/in/deep.pgm"})
    put(root, f);
  put(root, "README.txt");
  fs::create_directory_symlink("../a/sub", fs::path(root) / "b" / "link");

  const testing::ScriptResult r = testing::run_python_script("tests/data/torchvision_folder.py", "'" + root + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json want = nlohmann::json::parse(r.output);
  const ImageFolderListing got = list_image_folder(root);
  EXPECT_EQ(got.classes, want["classes"].get<std::vector<std::string>>());
  for (size_t i = 0; i < got.classes.size(); ++i) EXPECT_EQ(want["class_to_idx"][got.classes[i]], int(i));
  ASSERT_EQ(got.paths.size(), want["samples"].size());
  for (size_t i = 0; i < got.paths.size(); ++i) {
    EXPECT_EQ(got.paths[i], want["samples"][i][0].get<std::string>()) << i;
    EXPECT_EQ(got.labels[i], want["samples"][i][1].get<int64_t>()) << i;
  }
}

TEST(ImageFolder, DecodesToChwOverTwoFiftyFiveWithClassNames) {
  testing::TempDir dir;
  put(dir.path(), "cat/1.png", "rgb.png");
  put(dir.path(), "cat/2.png", "grey.png");
  put(dir.path(), "dog/1.jpg", "rgb.jpg");
  const Dataset d = load_image_folder(dir.path(), {}, "pets");
  EXPECT_EQ(describe(d), "3 x 3 x 7 x 11, 2 classes");
  EXPECT_NO_THROW(check_dataset(d));
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(d.labels, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_TRUE(d.skipped.empty());
  const char* files[] = {"rgb.png", "grey.png", "rgb.jpg"};
  for (int64_t i = 0; i < 3; ++i) {
    const RgbImage rgb = decode_image_file(fixture(files[i]));
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t p = 0; p < 77; ++p)
        ASSERT_EQ(d.image(i)[ch * 77 + p], float(rgb.pixels[size_t(p * 3 + ch)]) / 255.0f) << i << " " << ch << " " << p;
  }
}

TEST(ImageFolder, TheThreadCountChangesNothing) {
  testing::TempDir dir;
  const char* files[] = {"rgb.png", "grey.png", "rgb.jpg", "progressive.jpg", "palette.png", "rgba16.png", "cmyk.jpg"};
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 7; ++i) put(dir.path(), "class" + std::to_string(k) + "/" + std::to_string(i) + ".img.png", files[(i + k) % 7]);
  const Dataset one = load_image_folder(dir.path(), {1, false}, "one");
  for (int workers : {2, 3, 8, 64}) {
    const Dataset many = load_image_folder(dir.path(), {workers, false}, "many");
    EXPECT_EQ(many.images, one.images) << workers;
    EXPECT_EQ(many.labels, one.labels) << workers;
  }
}

// A transform without random steps keeps its tensors while the whole set fits
// kept_image_bytes (exactly fitting included); past that the same transform runs per batch
// (the seeds' Resize((224, 224)) of 60,000 images would keep 36 GB), and the loader's batches
// hold the same pixels either way.
TEST(ImageFolder, AFixedTransformTooLargeToKeepIsMadePerBatchWithTheSamePixels) {
  testing::TempDir dir;
  const char* files[] = {"rgb.png", "grey.png", "rgb.jpg", "progressive.jpg", "palette.png", "rgba16.png", "cmyk.jpg"};
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 7; ++i) put(dir.path(), "class" + std::to_string(k) + "/" + std::to_string(i) + ".png", files[(i + k) % 7]);
  const TransformSpec resize = parse_transform_spec("--transform", "Resize((12, 16)),ToTensor()");
  const int64_t set_bytes = 14 * 3 * 12 * 16 * int64_t(sizeof(float));
  ImageFolderOptions fits, too_large;
  fits.workers = too_large.workers = 2;
  fits.kept_image_bytes = set_bytes;
  too_large.kept_image_bytes = set_bytes - 1;
  const Dataset kept = load_image_folder(dir.path(), fits, "kept", &resize);
  const Dataset per_batch = load_image_folder(dir.path(), too_large, "per batch", &resize);
  EXPECT_EQ(kept.source, nullptr);
  EXPECT_EQ(int64_t(kept.images.size()) * int64_t(sizeof(float)), set_bytes);
  ASSERT_NE(per_batch.source, nullptr);
  EXPECT_TRUE(per_batch.images.empty());
  EXPECT_EQ(per_batch.h, 12);
  EXPECT_EQ(per_batch.w, 16);
  LoaderOptions lo;
  lo.batch_size = 5, lo.shuffle = false;
  DataLoader a(kept, lo), b(per_batch, lo);
  int batches = 0;
  for (Batch x, y; a.next(x);) {
    ASSERT_TRUE(b.next(y));
    ASSERT_EQ(x.size, y.size);
    EXPECT_EQ(std::vector<float>(x.images, x.images + x.size * x.sample_numel()),
              std::vector<float>(y.images, y.images + y.size * y.sample_numel()))
        << "batch " << batches;
    EXPECT_EQ(std::vector<int64_t>(x.labels, x.labels + x.size), std::vector<int64_t>(y.labels, y.labels + y.size));
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

TEST(ImageFolder, MissingEmptyAndClasslessFoldersAreErrorsNamingThePath) {
  testing::TempDir dir;
  const std::string missing = error_of([&] { list_image_folder(dir.file("nowhere")); });
  EXPECT_NE(missing.find("imagefolder: " + dir.file("nowhere") + " does not exist"), std::string::npos) << missing;
  put(dir.path(), "file.png", "rgb.png");
  const std::string file = error_of([&] { list_image_folder(dir.file("file.png")); });
  EXPECT_NE(file.find(dir.file("file.png") + " is not a folder"), std::string::npos) << file;
  fs::create_directory(dir.file("flat"));
  put(dir.file("flat"), "1.png", "rgb.png");
  const std::string flat = error_of([&] { list_image_folder(dir.file("flat")); });
  EXPECT_NE(flat.find(dir.file("flat") + " has no class folders"), std::string::npos) << flat;
  put(dir.file("tree"), "full/1.png", "rgb.png");
  put(dir.file("tree"), "notes/readme.txt");
  fs::create_directories(dir.file("tree/void"));
  const std::string empty = error_of([&] { list_image_folder(dir.file("tree")); });
  EXPECT_NE(empty.find("no image files in the class folders " + dir.file("tree") + "/notes, " + dir.file("tree") +
                       "/void (the accepted extensions, in any case: .jpg, .jpeg, .png"),
            std::string::npos)
      << empty;
}

TEST(ImageFolder, DifferentSizesNameTwoFilesAndAskForResize) {
  testing::TempDir dir;
  put(dir.path(), "a/1.png", "rgb.png");
  put(dir.path(), "b/2.png", "rgb_5x3.png");
  const std::string message = error_of([&] { load_image_folder(dir.path(), {}, "sizes"); });
  EXPECT_NE(message.find(dir.path() + "/a/1.png is 11 x 7 but " + dir.path() + "/b/2.png is 5 x 3"), std::string::npos)
      << message;
  EXPECT_NE(message.find("need a --transform with Resize"), std::string::npos) << message;
}

TEST(ImageFolder, BadImagesFailNamingTheFileOrAreSkippedAndCounted) {
  testing::TempDir dir;
  put(dir.path(), "a/1.png", "rgb.png");
  put(dir.path(), "a/2.png", "truncated.png");
  put(dir.path(), "b/3.jpg", "rgb.jpg");
  put(dir.path(), "b/4.jpg", "not_an_image.png");
  const std::string message = error_of([&] { load_image_folder(dir.path(), {}, "bad"); });
  EXPECT_NE(message.find(dir.path() + "/a/2.png: corrupt PNG"), std::string::npos) << message;
  EXPECT_NE(message.find("--skip-bad-images"), std::string::npos) << message;
  const Dataset d = load_image_folder(dir.path(), {2, true}, "skipping");
  EXPECT_EQ(d.n, 2);
  EXPECT_EQ(d.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d.skipped, (std::vector<std::string>{dir.path() + "/a/2.png", dir.path() + "/b/4.jpg"}));

  testing::TempDir all_bad;
  put(all_bad.path(), "a/1.png", "corrupt.png");
  const std::string none = error_of([&] { load_image_folder(all_bad.path(), {1, true}, "none"); });
  EXPECT_NE(none.find(all_bad.path() + ": none of its 1 image files decoded"), std::string::npos) << none;
}

TEST(ImageFolder, ValDataIsTheTestSetAndMustHaveTheSameClasses) {
  testing::TempDir dir;
  put(dir.path(), "train/a/1.png", "rgb.png");
  put(dir.path(), "train/b/1.png", "grey.png");
  put(dir.path(), "val/a/1.png", "palette.png");
  put(dir.path(), "val/b/1.png", "rgba.png");
  put(dir.path(), "other/a/1.png", "rgb.png");
  put(dir.path(), "other/c/1.png", "rgb.png");
  const std::string train = "imagefolder:" + dir.file("train");
  DataSplits s = load_data(parse_data_specs(train, "imagefolder:" + dir.file("val"), {}), false);
  EXPECT_EQ(s.test.images, load_image_folder(dir.file("val"), {}, "val").images);
  EXPECT_EQ(s.train.images, load_image_folder(dir.file("train"), {}, "train").images);
  // Without --val-data the train images are the test set too, and the name says so.
  s = load_data(parse_data_specs(train, "", {}), false);
  EXPECT_EQ(s.test.images, s.train.images);
  EXPECT_NE(s.test.name.find("no --val-data"), std::string::npos) << s.test.name;
  const std::string message =
      error_of([&] { load_data(parse_data_specs(train, "imagefolder:" + dir.file("other"), {}), false); });
  EXPECT_NE(message.find("--val-data imagefolder:" + dir.file("other") + ": its class folders differ"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace dpcore::data
