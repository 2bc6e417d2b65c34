// dpcore predict: the scaling model (train/predict/scaling_model.h) on a real model. Measures one
// replica's step on this machine's CPU (train/predict/step_profile.h), or loads a profile saved
// by an earlier run, cuts the gradient buffer into DDP's buckets as `dpcore train` would
// (train/runners/ddp.h), and prints the predicted step time, exposed communication and scaling
// efficiency for 1, 2, 4, ... replicas of a cluster (or the counts asked for), per
// strategy. For a CPU cluster (one that gives its cores) it also measures how much a step
// slows while copies of it fill the cores (measure_busy_slowdown). With --stages, a
// pipeline's step instead: each layer measured on a micro-batch, the link between two
// stage threads measured, and the step of P stages x R replicas predicted.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace dpcore::train {

struct PredictOptions {
  std::string model = "resnet20";    // a reference model or a layer spec, as --model of train
  std::string input = "1x28x28";     // one sample's shape, CxHxW
  int64_t classes = 10;
  int64_t batch = 64;                // per replica
  std::string cluster = "h200x8-nvlink-ib400";  // a preset or G,A,B,a,b (scaling_model.h)
  std::string strategies = "ddp,dp,local:8";   // comma-separated: ddp, dp, local:K
  std::string algorithm = "best";    // ring | tree | best
  int max_replicas = 1024;
  std::string replicas;              // comma-separated replica counts instead of 1, 2, 4, ... max_replicas
  double bucket_mb = 25;             // DDP's bucket cap, as --bucket-mb of train
  double compute_scale = 1.0;        // multiplies the measured compute times (a faster device)
  int warmup = 2, steps = 5;         // of the measured profile
  int threads = 0;                   // CPU threads of the measurement (0: all cores)
  uint64_t seed = 0;
  std::string profile_in;            // load the profile from this JSON file instead of measuring
  bool model_given = true;           // with profile_in: false takes the model (its name, batch and
                                     // tensor sizes) from the profile, which need not be dpcore's
  std::string profile_out;           // save the measured profile here
  std::string json;                  // also write the predictions here
  // A pipeline instead of data parallelism (train/predict/pipeline_model.h): --stages as for
  // train, its --schedule and --micro-batches (0: one per stage); the replica counts are
  // each stage's data-parallel replicas.
  std::string stages;
  std::string schedule = "gpipe";
  int micro_batches = 0;
};

void predict(const PredictOptions& options, std::ostream& out);

}  // namespace dpcore::train
