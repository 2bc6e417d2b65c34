// dpcore_loader_bench: how many images a second the image-folder loader delivers, decoding
// and transforming them, with nothing else running: the loader that `dpcore train --data
// imagefolder:DIR --transform SPEC --workers N` feeds the step from (engine/data/image,
// engine/data/loader.h), measured as bench/compare_loader.py measures torchvision's
// ImageFolder + DataLoader beside it.
//
// The folder is listed and every file decoded once first (the check `dpcore train` makes
// before it trains; not timed here: "load_s" says how long it took). Then W warm-up
// batches, and the next K batches (shuffled, as training draws them) timed from the first
// request to the last batch in hand. With a transform that has random steps every batch
// is decoded and transformed again on the --workers threads; without, the tensors were made
// at load and the loader only gathers them. Prints ONE JSON line.
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "kernels/error.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dpcore;
  CLI::App app{"dpcore_loader_bench: images per second of the image-folder loader (decode + transforms); prints one "
               "JSON line"};
  std::string dir, transform;
  data::ImageFolderOptions images;
  int64_t batch = 64, batches = 20, warmup = 2;
  app.add_option("--data", dir, "the image folder (torchvision's ImageFolder layout)")->required();
  app.add_option("--transform", transform, "the transforms, as dpcore train --transform (e.g. "
                                           "\"RandomResizedCrop(64),RandomHorizontalFlip(),ToTensor()\")")
      ->required();
  app.add_option("--workers", images.workers, "decoding threads (dpcore train --workers)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch", batch, "images per batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batches", batches, "timed batches")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed batches first")->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    images.transform = transform;
    const data::DataSpec spec = data::parse_data_specs("imagefolder:" + dir, "", images);
    const auto load_start = std::chrono::steady_clock::now();
    const data::Dataset train = data::load_split(spec, data::Split::train);
    const double load_s = seconds_since(load_start);
    data::LoaderOptions options;
    options.batch_size = batch;
    data::DataLoader loader(train, options);
    data::Batch b;
    auto next = [&] {  // a batch; at an epoch's end, the next epoch's first
      if (!loader.next(b)) DPCORE_CHECK(loader.next(b), "dpcore_loader_bench: ", dir, " has no images");
    };
    for (int64_t i = 0; i < warmup; ++i) next();
    const auto start = std::chrono::steady_clock::now();
    int64_t delivered = 0;
    for (int64_t i = 0; i < batches; ++i) {
      next();
      delivered += b.size;
    }
    const double seconds = seconds_since(start);
    nlohmann::json j = {{"engine", "dpcore"},     {"data", dir},          {"transform", transform},
                        {"workers", images.workers}, {"batch", batch},     {"batches", batches},
                        {"warmup", warmup},       {"images", delivered},  {"sample", b.sample},
                        {"seconds", seconds},     {"images_per_s", double(delivered) / seconds},
                        {"load_s", load_s}};
    std::cout << j.dump() << std::endl;
  } catch (const Error& e) {
    std::cerr << "dpcore_loader_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
