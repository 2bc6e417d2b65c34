// `dpcore train --data imagefolder:DIR` as a user runs it: class_to_idx printed and saved
// beside the weights, --val-data, --workers, --skip-bad-images and the errors that name a
// file; and a few steps of resnet8 on Fashion-MNIST written as PNGs by
// scripts/make_imagefolder.py.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/cli_run.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using dpcore::testing::CommandResult;
using dpcore::testing::run;
using dpcore::testing::slurp;

void copy_fixture(const std::string& name, const std::string& to) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(dpcore::testing::source_dir() + "/tests/fixtures/images/" + name, to);
}

const std::string kModel = " --model \"conv(4,3,p1) relu pool(2) flatten linear(2)\"";
const std::string kRun = " --batch 2 --steps 2 --threads 1 --progress 0 --device cpu";

TEST(CliImageFolder, HelpExplainsTheImageFolderFlags) {
  const CommandResult r = run("train --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"imagefolder:DIR", "--val-data", "--workers", "--skip-bad-images", "--transform",
                           "--val-transform"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
}

TEST(CliImageFolder, TrainsPrintsAndSavesClassToIdxAndSkipsBadImages) {
  dpcore::testing::TempDir dir;
  const std::string train = dir.file("train"), val = dir.file("val");
  copy_fixture("rgb.png", train + "/cat/1.png");
  copy_fixture("grey.png", train + "/cat/2.png");
  copy_fixture("rgb.jpg", train + "/dog/1.jpg");
  copy_fixture("progressive.jpg", train + "/dog/2.jpg");
  copy_fixture("truncated.png", train + "/dog/3.png");
  copy_fixture("palette.png", val + "/cat/1.png");
  copy_fixture("cmyk.jpg", val + "/dog/1.jpg");
  const std::string data = "train --data imagefolder:" + train + " --val-data imagefolder:" + val + kModel + kRun;

  CommandResult r = run(data + " --workers 3 --skip-bad-images --save " + dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 x 3 x 7 x 11, 2 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("class_to_idx: {\"cat\":0,\"dog\":1}"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--skip-bad-images: left out 1 file of imagefolder " + train +
                          " that did not decode, the first " + train + "/dog/3.png"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(dir.file("w.class_to_idx.json")), "{\"cat\":0,\"dog\":1}\n");
  // eval with --val-data: the two validation images, normalised with the train folder's statistics.
  const CommandResult e = run("eval --data imagefolder:" + train + " --val-data imagefolder:" + val +
                              " --skip-bad-images" + kModel + " --device cpu --init " + dir.file("w.safetensors"));
  EXPECT_NE(e.output.find("on 2 samples"), std::string::npos) << e.output;

  // Without --val-data the train images are the test set: their skipped file counted once.
  r = run("train --data imagefolder:" + train + " --skip-bad-images" + kModel + kRun);
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t first = r.output.find("--skip-bad-images: left out 1 file");
  EXPECT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--skip-bad-images: left out", first + 1), std::string::npos) << r.output;

  r = run(data);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(train + "/dog/3.png: corrupt PNG"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--skip-bad-images"), std::string::npos) << r.output;
  r = run("train --data imagefolder:" + dir.file("nowhere") + kModel + kRun);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(dir.file("nowhere") + " does not exist"), std::string::npos) << r.output;
  r = run("train --data imagefolder:" + train + " --workers 0" + kModel + kRun);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--workers 0: must be a whole number of at least 1"), std::string::npos) << r.output;
  r = run("train --data fashion-mnist --val-data imagefolder:" + val + kModel + kRun);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("needs --data imagefolder:DIR"), std::string::npos) << r.output;
}

// resnet8, not fashioncnn: ImageFolder's images are RGB (PIL's convert("RGB"), as torchvision
// loads them), and fashioncnn takes one channel; a Grayscale transform comes with the
// transforms.
TEST(CliImageFolder, ResNet8TrainsOnFashionMnistWrittenAsPngs) {
  if (!dpcore::testing::python_can_import("PIL")) GTEST_SKIP() << "no PIL (python3-pil) for scripts/make_imagefolder.py";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  dpcore::testing::TempDir dir;
  const std::string out = dir.file("fashion");
  const dpcore::testing::ScriptResult made =
      dpcore::testing::run_python_script("scripts/make_imagefolder.py", "fashion-mnist '" + out + "' --per-class 4");
  ASSERT_EQ(made.status, 0) << made.output;
  CommandResult r = run("train --data imagefolder:" + out + "/train --val-data imagefolder:" + out +
                        "/test --model resnet8 --batch 8 --steps 3 --threads 1 --progress 0 --device cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("40 x 3 x 28 x 28, 10 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"0_T-shirt_top\":0,\"1_Trouser\":1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
}

TEST(CliImageFolder, TransformsTrainAndEvaluateImagesOfDifferentSizes) {
  dpcore::testing::TempDir dir;
  const std::string train = dir.file("train");
  copy_fixture("rgb.png", train + "/cat/1.png");      // 11 x 7
  copy_fixture("rgb_5x3.png", train + "/cat/2.png");  // 5 x 3
  copy_fixture("rgb.jpg", train + "/dog/1.jpg");
  copy_fixture("grey.png", train + "/dog/2.png");
  const std::string transforms = " --transform \"RandomResizedCrop(6),RandomHorizontalFlip(),ToTensor(),"
                                 "Normalize(imagenet)\" --val-transform \"Resize(6),CenterCrop(6),ToTensor(),"
                                 "Normalize(imagenet)\"";
  CommandResult r = run("train --data imagefolder:" + train + transforms + kModel + kRun + " --workers 2 --save " +
                        dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 x 3 x 6 x 6, 2 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  const CommandResult e = run("eval --data imagefolder:" + train + transforms + kModel + " --device cpu --init " +
                              dir.file("w.safetensors"));
  EXPECT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("on 4 samples"), std::string::npos) << e.output;

  r = run("train --data imagefolder:" + train + " --transform \"Rotate(3),ToTensor()\"" + kModel + kRun);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--transform \"Rotate(3),ToTensor()\": unknown transform \"Rotate\""), std::string::npos)
      << r.output;
  r = run("train --data fashion-mnist --transform \"ToTensor()\"" + kModel + kRun);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--transform \"ToTensor()\" needs --data imagefolder:DIR"), std::string::npos) << r.output;
}

}  // namespace
