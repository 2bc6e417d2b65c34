// Chooses the runner of a training run: one device, the data-parallel runner of --mode, or
// the runner of another --sync strategy (train/sync/sync_strategy.h), or a pipeline's
// (--stages or --pipeline, train/pipeline/pipeline_runner.h; with --replicas, train/pipeline/hybrid_runner.h;
// under mpirun, train/pipeline/stage_process_runner.h), after checking --grad-dtype against it.
#include "train/pipeline/hybrid_runner.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/stage_process_runner.h"
#include "train/sync/async_sgd.h"
#include "train/runners/data_parallel.h"
#include "train/runners/ddp.h"
#include "train/sync/local_sgd.h"
#include "train/runners/runner.h"
#include "train/sync/sync_strategy.h"
#include "train/step/gradient_wire.h"

namespace dpcore::train {

void check_grad_dtype(const ParallelOptions& p) {
  grad_dtype_of(p.grad_dtype);
  if (p.grad_dtype == "fp32") return;
  DPCORE_CHECK(!is_pipeline(p.pipeline), "--grad-dtype ", p.grad_dtype, " with ", pipeline::pipeline_flag(p.pipeline),
               ": only the data-parallel gradient allreduce (--mode dp or ddp) moves 16-bit gradients");
  DPCORE_CHECK(p.sync == "full", "--grad-dtype ", p.grad_dtype, " with --sync ", p.sync,
               ": only the gradient allreduce of a synchronous step (--sync full) moves 16-bit gradients");
  DPCORE_CHECK(p.replicas > 1 || p.backend != "local", "--grad-dtype ", p.grad_dtype,
               " with one replica: there is no gradient allreduce to make smaller (give --replicas 2 or more, or "
               "run under mpirun)");
}

std::unique_ptr<StepRunner> make_runner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                        const ParallelOptions& options) {
  DPCORE_CHECK(options.replicas >= 1, "--replicas ", options.replicas, " must be at least 1");
  check_grad_dtype(options);
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
