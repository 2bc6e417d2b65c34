// Makes the data-parallel runners available to the training loop (layers/train/runner.h)
// under their --mode names, without layers/ including anything from comm/.
#include "comm/parallel/ddp.h"

namespace dpcore::comm {
namespace {

const bool registered = [] {
  nn::register_runner("dp", [](std::unique_ptr<nn::Model> m, const SgdConfig& sgd, int64_t accum,
                               const nn::ParallelOptions& o) -> std::unique_ptr<nn::StepRunner> {
    return std::make_unique<DataParallelRunner>(std::move(m), sgd, accum, o);
  });
  nn::register_runner("ddp", [](std::unique_ptr<nn::Model> m, const SgdConfig& sgd, int64_t accum,
                                const nn::ParallelOptions& o) -> std::unique_ptr<nn::StepRunner> {
    return std::make_unique<DistributedRunner>(std::move(m), sgd, accum, o);
  });
  return true;
}();

}  // namespace
}  // namespace dpcore::comm
