// Chooses the runner of a training run: one device, the data-parallel runner of --mode, or
// the runner of another --sync strategy (train/sync/sync_strategy.h), or a pipeline's
// (--stages or --pipeline, train/pipeline/pipeline_runner.h; with --replicas, train/pipeline/hybrid_runner.h;
// under mpirun, train/pipeline/stage_process_runner.h).
#include "train/pipeline/hybrid_runner.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/stage_process_runner.h"
#include "train/sync/async_sgd.h"
#include "train/runners/data_parallel.h"
#include "train/runners/ddp.h"
#include "train/sync/local_sgd.h"
#include "train/runners/runner.h"
#include "train/sync/sync_strategy.h"

namespace dpcore::train {

std::unique_ptr<StepRunner> make_runner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                        const ParallelOptions& options) {
  DPCORE_CHECK(options.replicas >= 1, "--replicas ", options.replicas, " must be at least 1");
  if (is_pipeline(options.pipeline)) {
    if (options.backend == "mpi")
      return std::make_unique<pipeline::StageProcessRunner>(std::move(model), optimizer, accum, options);
    if (options.replicas > 1) return std::make_unique<pipeline::HybridRunner>(std::move(model), optimizer, accum, options);
    return std::make_unique<pipeline::PipelineRunner>(std::move(model), optimizer, accum, options);
  }
  check_failure_policy(options.failure, options.replicas, options.backend, options.sync);
  const SyncStrategy sync = parse_sync(options.sync);
  if (sync.kind == SyncStrategy::Kind::Local) {
    return std::make_unique<LocalSgdRunner>(std::move(model), optimizer, accum, options, sync.period);
  }
  if (sync.kind == SyncStrategy::Kind::Async) return std::make_unique<AsyncRunner>(std::move(model), optimizer, accum, options);
  if (options.replicas == 1 && options.backend == "local" && options.split == "even") {
    return std::make_unique<SingleDeviceRunner>(std::move(model), optimizer, accum, options);
  }
  if (options.mode == "dp") return std::make_unique<DataParallelRunner>(std::move(model), optimizer, accum, options);
  if (options.mode == "ddp") return std::make_unique<DistributedRunner>(std::move(model), optimizer, accum, options);
  fail("--mode ", options.mode, ": unknown (expected dp or ddp)");
}

}  // namespace dpcore::train
