// Chooses the runner of a training run: one device, or the data-parallel runner of --mode.
#include "train/data_parallel.h"
#include "train/ddp.h"
#include "train/runner.h"

namespace dpcore::train {

std::unique_ptr<StepRunner> make_runner(std::unique_ptr<Model> model, const SgdConfig& sgd, int64_t accum,
                                        const ParallelOptions& options) {
  DPCORE_CHECK(options.replicas >= 1, "--replicas ", options.replicas, " must be at least 1");
  if (options.replicas == 1 && options.backend == "local" && options.split == "even") {
    return std::make_unique<SingleDeviceRunner>(std::move(model), sgd, accum);
  }
  if (options.mode == "dp") return std::make_unique<DataParallelRunner>(std::move(model), sgd, accum, options);
  if (options.mode == "ddp") return std::make_unique<DistributedRunner>(std::move(model), sgd, accum, options);
  fail("--mode ", options.mode, ": unknown (expected dp or ddp)");
}

}  // namespace dpcore::train
