// Fault injection: make replica R fail (before its compute, or after its optimizer step),
// hang, exit, produce NaN gradients, flip a bit of its parameters, or run slower, at step S, so that recovery and the guards can be tested, and
// tried by anyone (docs/fault-tolerance.md). `dpcore train --inject SPEC` (repeatable) or
// the environment variable DPCORE_INJECT, same syntax.
//
// Steps are counted as the log counts them: step S is the S-th optimizer step of the run
// (from 1), whatever the replica count, across resumes. Under --sync async, where whichever
// replica is free takes the next piece of data, a replica's step S is the S-th piece it
// computes in this run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/model.h"

namespace dpcore::train {

struct Fault {
  enum class Kind { Throw, ThrowAfterStep, Hang, Exit, NanGradients, BitFlip, Slow };
  Kind kind = Kind::Throw;
  int replica = 0;      // global replica index (the rank)
  int64_t step = 1;     // the step it happens at; for Slow, the first slowed step
  double factor = 1;    // Slow: the replica's compute takes this many times as long
};

// Parses one --inject value; throws an Error naming the spec and what is wrong with it.
// Syntax: KIND:replica=R,step=S[,factor=F], KIND one of throw, throw-after-step, hang, exit,
// nan, bitflip, slow; several faults in one value are separated by ';' (as DPCORE_INJECT holds them).
// `source` names where the text came from in errors ("--inject", "DPCORE_INJECT").
std::vector<Fault> parse_faults(const std::string& spec, const std::string& source = "--inject");
// The fault as parse_faults reads it back: "nan:replica=1,step=3".
std::string describe(const Fault& fault);

// The exit status of an injected exit (what a crashed process's launcher sees).
constexpr int kInjectedExitCode = 75;

class FaultInjector {
 public:
  FaultInjector() = default;
  explicit FaultInjector(std::vector<Fault> faults);
  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }

  // Runs replica `replica`'s compute (forward and backward of its share, before any
  // reduction) of step `step`, with what is planned for (replica, step):
  //   Throw, Hang, Exit   before compute (a hang sleeps until release_hangs(), then
  //                       throws; Exit calls _exit(kInjectedExitCode) at once);
  //   NanGradients        after compute, the replica's flat gradient buffer set to NaN;
  //   BitFlip             after compute, one bit of the replica's first parameter flipped;
  //   Slow                after compute, sleeps (factor - 1) x compute's duration.
  void run(int replica, int64_t step, layers::Model& model, const std::function<void()>& compute) const;

  // run() in two halves, for a runner whose compute is not one call (--mode dp: forward
  // and backward are phases driven by the main thread): before() what happens before
  // compute, after() what happens after it, given compute's duration in seconds.
  void before(int replica, int64_t step) const;
  // `nan`: kNanWrittenByRunner when the runner writes an injected NaN itself (ddp, into each
  // bucket as it launches its allreduce during backward: after() would race with them).
  enum NanWriter { kNanWrittenHere, kNanWrittenByRunner };
  void after(int replica, int64_t step, layers::Model& model, double compute_seconds,
             NanWriter nan = kNanWrittenHere) const;

  // Right after replica `replica`'s optimizer step of step `step` (every runner calls it
  // there; its parameters are updated, and other replicas' may be): throws for
  // ThrowAfterStep, a failure that leaves a step some replicas applied.
  void after_step(int replica, int64_t step) const;

  // Whether replica `replica`'s gradients are to be NaN at `step` (an injected NaN): the
  // reduction must carry it (dp reduces after after(); ddp poisons its buckets).
  bool writes_gradients(int replica, int64_t step) const;

  // Refuses, naming the fault, what this run cannot carry out: a replica outside
  // 0..replicas-1 (`replicas_flag` names where R comes from, e.g. "--replicas 2"), and a
  // hang no timeout would notice (one replica: no peer waits for it).
  void check(int replicas, const std::string& replicas_flag) const;

  // Ends the injected hangs of every copy of this injector: each then throws. Called when
  // the run gives up on its replicas (a peer's collective timed out and the group was
  // aborted), so that a hung replica's thread can be joined instead of hanging the process.
  void release_hangs() const;
  // After the run went on past a failure (--on-replica-failure shrink), the hangs of later
  // steps hang again (until the next release_hangs()).
  void rearm_hangs() const;

 private:
  struct HangState;
  std::vector<Fault> faults_;
  std::shared_ptr<HangState> hangs_;  // shared by copies: the runner's copy releases the hangs
};

}  // namespace dpcore::train
