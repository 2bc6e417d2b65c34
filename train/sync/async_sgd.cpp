#include "train/sync/async_sgd.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "train/runners/data_parallel.h"
#include "train/step/step.h"

namespace dpcore::train {

using Clock = SteadyClock;

// Everything the replica threads touch. Shared, so that a thread still blocked when the
// runner is destroyed (an injected hang, after the timeout failed the run) can be left
// behind, detached, without touching freed memory.
struct AsyncRunner::State {
  struct Piece {
    Tensor x, y;  // host copies: the loader reuses its batch memory
    int64_t step = 0, first_row = 0;
    int64_t counted = 0;  // its counted targets: its gradient is the mean over them
  };

  std::unique_ptr<layers::Model> master;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<std::unique_ptr<layers::Model>> replicas;
  int64_t accum = 1, max_staleness = 0;
  std::chrono::milliseconds timeout{0};
  FaultInjector faults;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Piece> queue;
  std::vector<int64_t> in_flight;  // per replica: the version of its snapshot, -1 when idle
  std::vector<bool> exited;        // per replica: its thread has returned
  int64_t version = 0;             // updates applied
  std::vector<AppliedUpdate> updates;
  std::vector<int64_t> histogram;  // staleness 0..S of this epoch's updates
  double loss = 0;                 // of the pieces applied and not yet reported
  int64_t samples = 0, targets = 0;
  // Per replica, since the last report: compute (an injected slowdown included), idle (held
  // back by the staleness bound), optimizer (applying to the master), rows.
  std::vector<ReplicaLane> lanes;
  Clock::time_point last_progress = Clock::now();
  int failed = -1;  // the first replica that failed
  std::string error;
  bool stopping = false;

  int64_t gradients_in_flight() const {
    return int64_t(std::count_if(in_flight.begin(), in_flight.end(), [](int64_t v) { return v >= 0; }));
  }
  // Whether replica r may apply its gradient now: every other gradient in flight, applied
  // after it oldest snapshot first, must stay within the bound.
  bool may_apply(int r) const {
    std::vector<int64_t> others;
    for (size_t i = 0; i < in_flight.size(); ++i) {
      if (int(i) != r && in_flight[i] >= 0) others.push_back(in_flight[i]);
    }
    std::sort(others.begin(), others.end());
    for (size_t i = 0; i < others.size(); ++i) {
      if (version + 1 + int64_t(i) - others[i] > max_staleness) return false;
    }
    return true;
  }
  // The stats of the pieces applied since the last call, and where the replicas' time went.
  StepStats report() {
    StepStats stats{Tensor::full({}, loss, master->dtype(), master->device()), samples, targets};
    stats.times = combine_lanes(lanes);
    loss = 0, samples = 0, targets = 0;
    std::fill(lanes.begin(), lanes.end(), ReplicaLane{});
    return stats;
  }
  // Tests: called on replica r's thread before its snapshot ("snapshot", mutex held), its
  // compute ("compute", not held) and its update ("apply", held); what it throws goes where
  // an error there would.
  std::function<void(int, const char*)> phase_hook;
  void at_phase(int r, const char* phase) const {
    if (phase_hook) phase_hook(r, phase);
  }
  void fail_replica(int r, const std::string& message) {
    if (failed < 0) failed = r, error = message;
    changed.notify_all();
  }
  // Waits (mutex held by `lock`) until `done`, or fails the run if no update was applied
  // for the timeout while some replica held a piece.
  template <class Done>
  void wait_or_time_out(std::unique_lock<std::mutex>& lock, const char* what, Done done) {
    while (!done()) {
      if (failed >= 0) fail("async: replica ", failed, " failed: ", error);
      changed.wait_for(lock, std::chrono::milliseconds(100));
      if (!done() && gradients_in_flight() > 0 && Clock::now() - last_progress > timeout) {
        int oldest = -1;
        for (size_t i = 0; i < in_flight.size(); ++i) {
          if (in_flight[i] >= 0 && (oldest < 0 || in_flight[i] < in_flight[size_t(oldest)])) oldest = int(i);
        }
        faults.release_hangs();  // (an injected hang ends now, so its thread can be joined)
        fail_replica(oldest, "no update was applied for " + std::to_string(timeout.count() / 1000.0) +
                                 " s (--replica-timeout) while " + what + "; replica " + std::to_string(oldest) +
                                 " holds the oldest piece");
      }
    }
    if (failed >= 0) fail("async: replica ", failed, " failed: ", error);
  }
};

namespace {

// Copies the master's parameters and buffers into replica r's model (mutex held).
void take_snapshot(AsyncRunner::State& s, layers::Model& model) {
  model.parameters().values().copy_(s.master->parameters().values());
  if (!model.buffers().empty()) model.buffers().values().copy_(s.master->buffers().values());
  runtime::synchronize(model.device());  // the master may change as soon as the lock is released
}

// One SGD step of the master with replica r's gradient (mutex held).
void apply(AsyncRunner::State& s, layers::Model& model) {
  s.master->parameters().grads().copy_(model.parameters().grads());
  s.optimizer->step();
  if (!model.buffers().empty()) s.master->buffers().values().copy_(model.buffers().values());
  runtime::synchronize(s.master->device());
}

// Replica r's piece: snapshot, gradient, and (when the bound allows) the master's update.
// Called and returns with the mutex held (`lock`); false when the run is stopping or failed
// meanwhile. Throws what the snapshot, the compute or the update throws.
bool compute_and_apply(AsyncRunner::State& s, int r, layers::Model& model, std::unique_lock<std::mutex>& lock,
                       AsyncRunner::State::Piece piece, int64_t piece_number) {
  ReplicaLane& lane = s.lanes[size_t(r)];
  const int64_t snapshot = s.version;
  // --replica-timeout counts from the last update, or from now when no other gradient is
  // in flight: the time before (setup, evaluation, checkpoints) is nobody's delay.
  if (s.gradients_in_flight() == 0) s.last_progress = Clock::now();
  s.in_flight[size_t(r)] = snapshot;
  s.changed.notify_all();  // (step() waits for the queue to shrink)
  s.at_phase(r, "snapshot");
  take_snapshot(s, model);
  lock.unlock();
  s.at_phase(r, "compute");

  const int64_t rows = piece.x.size(0);
  double loss = 0;
  const Clock::time_point computing = Clock::now();
  s.faults.run(r, piece_number, model, [&] {
    trace::Span span("step", [&] {
      return trace::Label{"piece of step " + std::to_string(piece.step),
                          {{"rows", rows}, {"first_row", piece.first_row}, {"snapshot", snapshot}}};
    });
    model.zero_grad();
    Tensor x = piece.x.to(model.device()), y = piece.y.to(model.device());
    loss = accumulate_gradients(model, x, y, std::min(s.accum, rows), gradient_scale(piece.counted),
                                {uint64_t(piece.step), piece.first_row})
               .item();
  });

  lock.lock();
  lane.compute += seconds_since(computing);
  lane.samples += rows;
  {
    trace::Span span("wait", "wait for older gradients (staleness bound)");
    const Clock::time_point waiting = Clock::now();
    s.changed.wait(lock, [&] { return s.stopping || s.failed >= 0 || s.may_apply(r); });
    lane.idle += seconds_since(waiting);
  }
  if (s.stopping || s.failed >= 0) return false;
  AppliedUpdate u{s.version + 1, r, piece.step, piece.first_row, rows, snapshot};
  trace::Span span("optimizer", [&] { return trace::Label{"apply", {{"staleness", u.staleness()}}}; });
  const Clock::time_point applying = Clock::now();
  s.at_phase(r, "apply");
  apply(s, model);
  lane.optimizer += seconds_since(applying);
  s.version = u.version;
  s.updates.push_back(u);
  // (Sized for 0..S; grown rather than overrun should the bound ever fail: the log shows it.)
  if (size_t(u.staleness()) >= s.histogram.size()) s.histogram.resize(size_t(u.staleness()) + 1, 0);
  s.histogram[size_t(u.staleness())]++;
  s.loss += loss, s.samples += rows, s.targets += piece.counted;
  s.in_flight[size_t(r)] = -1;
  s.last_progress = Clock::now();
  s.changed.notify_all();
  s.faults.after_step(r, piece_number);  // (its update is applied and counted)
  return true;
}

void replica_loop(std::shared_ptr<AsyncRunner::State> state, int r) {
  AsyncRunner::State& s = *state;
  layers::Model& model = *s.replicas[size_t(r)];
  trace::set_lane("replica " + std::to_string(r), trace::kReplicaLanes + r);
  backend_for(model.device()).use_thread_stream(model.device().index, r);
  std::unique_lock<std::mutex> lock(s.mutex);
  auto finish = [&] {
    s.in_flight[size_t(r)] = -1;
    s.exited[size_t(r)] = true;
    s.changed.notify_all();
  };
  int64_t pieces = 0;  // this replica's, counted for --inject (see async_sgd.h)
  while (true) {
    {
      trace::Span span("wait", "wait for a piece (or the staleness bound)");
      const bool held_back = !s.queue.empty();  // (an empty queue is the loader's, not a replica's, wait)
      const Clock::time_point waiting = Clock::now();
      s.changed.wait(lock, [&] {
        return s.stopping || s.failed >= 0 || (!s.queue.empty() && s.gradients_in_flight() <= s.max_staleness);
      });
      if (held_back) s.lanes[size_t(r)].idle += seconds_since(waiting);
    }
    if (s.stopping || s.failed >= 0) return finish();
    AsyncRunner::State::Piece piece = std::move(s.queue.front());
    s.queue.pop_front();
    // Whatever fails, in the snapshot, the compute or the update, fails the run naming this
    // replica: an exception must not leave the thread (std::terminate).
    try {
      if (!compute_and_apply(s, r, model, lock, std::move(piece), ++pieces)) return finish();
    } catch (const std::exception& e) {
      if (!lock.owns_lock()) lock.lock();
      s.fail_replica(r, e.what());
      return finish();
    }
  }
}

}  // namespace

AsyncRunner::AsyncRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                         const ParallelOptions& options)
    : state_(std::make_shared<State>()) {
  DPCORE_CHECK(options.backend == "local", "--sync async with --backend ", options.backend,
               ": the parameter server runs in one process, its replicas are threads; use --backend local, "
               "or --sync local:K across processes");
  DPCORE_CHECK(options.split == "even", "--sync async with --split ", options.split,
               ": async hands equal pieces to whichever replica is free, so a fast replica already does more");
  DPCORE_CHECK(options.batchnorm == "local", "--sync async with --batchnorm ", options.batchnorm,
               ": synchronised batch norm needs the replicas in one step; use --batchnorm local");
  DPCORE_CHECK(!options.guards.skip_nonfinite && options.guards.check_replicas == 0,
               "--sync async with --skip-nonfinite or --check-replicas: the guards judge the one reduced "
               "gradient and the identical replicas of --sync full; async has neither");
  DPCORE_CHECK(options.max_staleness >= 0, "--max-staleness ", options.max_staleness, " must be at least 0");
  State& s = *state_;
  s.accum = accum;
  s.max_staleness = options.max_staleness;
  s.timeout = std::chrono::milliseconds(int64_t(options.timeout_s * 1000));
  s.faults = options.faults;
  s.faults.check(options.replicas, "--replicas " + std::to_string(options.replicas));
  for (const Device& d : replica_devices(options, model->device())) s.replicas.push_back(model->replicate(d));
  s.master = std::move(model);
  s.optimizer = make_optimizer(s.master->parameters(), optimizer);
  // The copies and zero fills above went to this thread's legacy default stream of each
  // device; the replica threads snapshot and update on their own non-blocking streams,
  // which CUDA does not order after it. Waiting for the devices here orders them first.
  runtime::synchronize(s.master->device());
  for (const auto& replica : s.replicas) runtime::synchronize(replica->device());
  s.in_flight.assign(s.replicas.size(), -1);
  s.exited.assign(s.replicas.size(), false);
  s.lanes.assign(s.replicas.size(), ReplicaLane{});
  s.histogram.assign(size_t(s.max_staleness + 1), 0);
  for (int r = 0; r < int(s.replicas.size()); ++r) threads_.emplace_back(replica_loop, state_, r);
}

AsyncRunner::~AsyncRunner() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
    state_->changed.notify_all();
  }
  state_->faults.release_hangs();
  // A replica that returned (or will, at its next wait) is joined; one still inside its
  // computation is waited for briefly, then left behind: it holds its share of the state.
  auto deadline = Clock::now() + std::chrono::seconds(1);
  for (size_t r = 0; r < threads_.size(); ++r) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait_until(lock, deadline, [&] { return bool(state_->exited[r]); });
    const bool exited = state_->exited[r];
    lock.unlock();
    if (exited) threads_[r].join();
    else threads_[r].detach();
  }
}

StepStats AsyncRunner::step(const data::Batch& batch) {
  State& s = *state_;
  const int64_t replicas = int64_t(s.replicas.size());
  std::vector<State::Piece> pieces;
  int64_t row = 0;
  const int64_t step = step_number();
  for (int64_t rows : chunk_sizes(batch.size, int(replicas))) {
    if (rows == 0) continue;
    const data::Batch rows_of_piece = batch_rows(batch, row, row + rows);
    auto [x, y] = batch_tensors(rows_of_piece, Device::cpu());
    pieces.push_back({x, y, step, row, counted_targets(rows_of_piece)});
    row += rows;
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  for (State::Piece& p : pieces) s.queue.push_back(std::move(p));
  s.changed.notify_all();
  s.wait_or_time_out(lock, "the loader waited for the queue", [&] { return int64_t(s.queue.size()) < replicas; });
  return s.report();
}

StepStats AsyncRunner::settle() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.wait_or_time_out(lock, "waiting for the last pieces", [&] { return s.queue.empty() && s.gradients_in_flight() == 0; });
  return s.report();
}

Model& AsyncRunner::model() { return *state_->master; }
Optimizer& AsyncRunner::optimizer() { return *state_->optimizer; }

void AsyncRunner::set_rates(double lr, double momentum) {
  std::lock_guard<std::mutex> lock(state_->mutex);  // the replicas step the master under it
  state_->optimizer->set_lr(lr);
  state_->optimizer->set_momentum(momentum);
}

std::string AsyncRunner::describe() const {
  RunnerDescription d;
  d.parallelism = "asynchronous SGD (async, parameter server in this process)";
  d.replicas = int(state_->replicas.size());
  for (const auto& m : state_->replicas) d.devices.push_back(m->device());
  d.details = {"max staleness " + std::to_string(state_->max_staleness)};
  d.accum = state_->accum;
  return describe_runner(d);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> AsyncRunner::epoch_counters() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::pair<std::string, std::vector<int64_t>>> counters = {{"staleness_histogram", state_->histogram}};
  std::fill(state_->histogram.begin(), state_->histogram.end(), 0);
  return counters;
}

const std::vector<AppliedUpdate>& AsyncRunner::updates() const { return state_->updates; }

void AsyncRunner::set_phase_hook_for_testing(std::function<void(int replica, const char* phase)> hook) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->phase_hook = std::move(hook);
}
int64_t AsyncRunner::max_staleness() const { return state_->max_staleness; }

}  // namespace dpcore::train
