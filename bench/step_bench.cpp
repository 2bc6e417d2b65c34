// dpcore_step_bench: the time of one whole training step of a reference model, measured
// the way the PyTorch side of bench/compare_cpu.py and bench/compare_gpu.py measures it.
//
// One step = zero the gradients, forward, NLL loss (mean over the batch), backward, SGD
// (lr 0.01, momentum 0.9) or, with --optimizer adamw, AdamW (torch.optim.AdamW's defaults:
// lr 0.001, weight decay 0.01); with --precision bf16 the forward runs under autocast. Models of token ids (bert-tiny, bert-mini, a bert(...)
// spec) take batches of --seq-len ids drawn from [1, --vocab): no padding, so every token
// is attended. The batch is random (fixed seed) and made once, before the
// clock starts, on the device the model lives on, exactly as PyTorch's side keeps its
// tensors on the GPU: no data loading is timed. With --replicas R > 1 the step goes
// through the data-parallel runner (--mode dp|ddp), which takes its batch from host
// memory by design (it scatters it to the replicas), so that copy is part of the step.
//
// W warm-up steps (they fill caches and allocators and pick cuDNN algorithms), then S
// timed steps; where the backend can capture (CUDA, unless --cuda-graph off) one replica's
// timed steps replay a graph of the whole step recorded after the warm-up, as PyTorch's
// torch.cuda.CUDAGraph. On the CPU each step is timed on the host clock. On a GPU the
// steps run back to back in blocks of --block, each block between two CUDA events on the
// stream the steps are queued on, exactly as bench/compare_gpu.py times PyTorch with
// torch.cuda.Event: a host synchronisation per step would add its latency (several
// microseconds) to every step and leave the GPU idle while the host queues the next one.
// Prints ONE JSON line: median, p10 and p90 of the step times in microseconds (per step,
// over the blocks on a GPU), samples/s at the median, and the device allocator's peak bytes
// from the end of the warm-up (before the capture) to the end, with what lives on counted
// (parameters, gradients, momentum, the batch and cuBLAS's workspaces), as
// torch.cuda.max_memory_allocated after torch.cuda.reset_peak_memory_stats() at that point;
// and resident_bytes, what lived at that point, so peak_bytes - resident_bytes is what a step
// adds: its activations, gradients on their way and the kernels' temporaries.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bench/timing_backend.h"
#include "engine/backend.h"
#include "kernels/error.h"
#include "engine/random.h"
#include "engine/runtime.h"
#include "engine/optimizer.h"
#include "engine/sgd.h"
#include "engine/trace.h"
#include "train/runners/runner.h"
#include "train/step/step.h"
#include "layers/zoo.h"

#ifdef DPCORE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/stream.h"
#endif

namespace {

using namespace dpcore;

struct BenchOptions {
  std::string model = "simplenet";
  int64_t image_size = 0;  // the ResNets: images of image_size x image_size (0: the model's own)
  int64_t seq_len = 0;     // token models: ids per sample (0: the model's own)
  int64_t vocab = 0;       // token models: ids drawn from [1, vocab) (0: the first embedding's rows)
  std::string optimizer = "sgd";
  std::string precision = "fp32";  // fp32 or bf16 (autocast, as dpcore train --precision bf16)
  int64_t batch = 64, accum = 1;
  int steps = 100, warmup = 20, block = 10;
  std::string device = "cpu";
  int threads = 0;
  uint64_t seed = 0;
  bool profile = false;
  std::string trace;  // record the timed steps into this Chrome trace (engine/trace.h)
  train::ParallelOptions parallel;
};

// The CUDA backend's settings (cli/main.cpp's BackendFlags). Only the flags given
// on the command line are passed on, so that an absent flag means the backend's default.
struct CudaFlags {
  std::string conv_engine = "auto", gemm_engine = "auto", cuda_graph = "on";
  bool tf32 = false;
  std::vector<std::pair<std::string, CLI::Option*>> given;  // backend option name -> flag

  void add_to(CLI::App& app) {
    given = {
        {"conv-engine", app.add_option("--conv-engine", conv_engine, "CUDA convolution engine: hand, cudnn or auto")
                            ->check(CLI::IsMember({"hand", "cudnn", "auto"}))},
        {"gemm-engine", app.add_option("--gemm-engine", gemm_engine, "CUDA matrix-product engine: hand, cublas or auto")
                            ->check(CLI::IsMember({"hand", "cublas", "auto"}))},
        {"tf32", app.add_flag("--tf32", tf32, "allow TF32 tensor-core math in cuDNN and cuBLAS (FP32 by default)")},
        {"cuda-graph", app.add_option("--cuda-graph", cuda_graph, "replay the step from a CUDA graph: on or off")
                           ->check(CLI::IsMember({"on", "off"}))},
    };
  }
  std::string value_of(const std::string& name) const {
    if (name == "conv-engine") return conv_engine;
    if (name == "gemm-engine") return gemm_engine;
    if (name == "tf32") return tf32 ? "on" : "off";
    return cuda_graph;
  }
  // Hands the given flags to the CUDA backend; they mean nothing for a CPU run.
  nlohmann::json apply(Device device) const {
    nlohmann::json applied = nlohmann::json::object();
    for (const auto& [name, flag] : given) {
      if (flag->count() == 0) continue;
      DPCORE_CHECK(device.is_cuda(), "--", name, " configures the CUDA backend; it needs --device cuda");
      backend_for(device).set_option(name, value_of(name));
      applied[name] = value_of(name);
    }
    return applied;
  }
};

// A random batch: pixels uniform in [-1, 1) or, for a model of token ids, ids uniform in
// [1, vocab); labels uniform over the classes.
struct HostBatch {
  std::vector<float> images;
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
  data::Batch view;
};

HostBatch random_batch(const Shape& sample, int64_t n, int64_t classes, int64_t vocab, uint64_t seed) {
  HostBatch b;
  Generator gen(seed);
  if (vocab > 0) {
    b.ids.resize(size_t(n * shape_numel(sample)));
    for (int64_t& v : b.ids) v = 1 + int64_t(gen.below(uint64_t(vocab - 1)));
    b.view.ids = b.ids.data();
  } else {
    b.images.resize(size_t(n * shape_numel(sample)));
    for (float& v : b.images) v = float(gen.uniform(-1.0, 1.0));
    b.view.images = b.images.data();
  }
  b.labels.resize(size_t(n));
  for (int64_t& v : b.labels) v = int64_t(gen.below(uint64_t(classes)));
  b.view.size = n;
  b.view.sample = sample;
  b.view.labels = b.labels.data();
  return b;
}

// Per op: calls and microseconds per timed step, then what the kernels and allocations
// leave of the mean step: the engine around them (autograd, checks, tensor handles).
nlohmann::json profile_json(const bench::OpTimes& times, int steps, double mean_step_us) {
  nlohmann::json j = nlohmann::json::object();
  double inside = 0;
  for (const auto& [name, t] : times) {
    const double us = t.seconds * 1e6 / steps;
    j[name] = {{"us_per_step", us}, {"calls_per_step", double(t.calls) / steps}};
    inside += us;
  }
  j["outside kernels (engine)"] = {{"us_per_step", mean_step_us - inside}};
  return j;
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double p) {
  size_t rank = size_t(std::ceil(p / 100.0 * double(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double median(const std::vector<double>& sorted) {
  size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

// Microseconds per step, one value per timed unit: each step on the CPU (host clock; the
// CPU backend runs a step before returning), each block of `block` back-to-back steps on
// a GPU (CUDA events on the calling thread's stream, where one model's step queues its
// work; the data-parallel runner synchronises the device before it returns, so there the
// events bracket its whole time too).
std::vector<double> time_steps(Device device, int steps, int block, const std::function<void()>& step) {
  std::vector<double> us;
#ifdef DPCORE_HAVE_CUDA
  if (device.is_cuda()) {
    namespace rt = kernels::cuda_runtime;
    rt::DeviceGuard guard(device.index);
    const cudaStream_t stream = rt::current_stream(device.index);
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int done = 0; done < steps; done += block) {
      // Every block starts on an idle device, so that no block's steps are queued while the
      // GPU still works through earlier ones (which would hide the host's share of the time).
      runtime::synchronize(device);
      CUDA_CHECK(cudaEventRecord(start, stream));
      for (int i = 0; i < block; ++i) step();
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(double(ms) * 1e3 / block);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    runtime::synchronize(device);  // reports a failure the GPU recorded (a bad class target)
    return us;
  }
#endif
  for (int i = 0; i < steps; ++i) {
    runtime::synchronize(device);
    auto t0 = std::chrono::steady_clock::now();
    step();
    runtime::synchronize(device);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return us;
}

Device parse_device(const std::string& text) {
  try {
    return Device::parse(text);
  } catch (const std::invalid_argument& e) {
    fail("--device: ", e.what());
  }
}

nlohmann::json run(const BenchOptions& o, const CudaFlags& cuda) {
  DPCORE_CHECK(o.batch >= o.accum * o.parallel.replicas, "--batch ", o.batch, " cannot be split into --accum ", o.accum,
               " x --replicas ", o.parallel.replicas, " micro-batches");
  const Device device = parse_device(o.device);
  backend_for(device);  // fails here, naming the device, when it is not compiled in or not present
  DPCORE_CHECK(!device.is_cuda() || o.steps % o.block == 0, "--steps ", o.steps,
               " is not a multiple of --block ", o.block, " (on a GPU the steps are timed in blocks)");
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  nlohmann::json backend_options = cuda.apply(device);
  DPCORE_CHECK(!o.profile || (device.is_cpu() && o.parallel.replicas == 1),
               "--profile times CPU kernel calls of one replica: it needs --device cpu and --replicas 1");
  bench::TimingBackend* timing = o.profile ? &bench::TimingBackend::install() : nullptr;
  if (!o.trace.empty()) trace::check_writable(o.trace, "--trace");

  const bool spec = o.model.find('(') != std::string::npos;
  Shape input = spec ? Shape{} : layers::reference_model(o.model).input_shape;
  if (o.image_size > 0) input = {input[0], o.image_size, o.image_size};
  if (o.seq_len > 0) input = {o.seq_len};
  layers::ModelDef def = layers::model_from_flag(o.model, input);
  auto model = std::make_unique<layers::Model>(std::move(def.net), def.input_shape, device, DType::Float32, o.seed);
  input = model->input_shape();
  if (o.precision == "bf16") model->set_precision(DType::BFloat16);  // its forwards under autocast
  DPCORE_CHECK(model->takes_token_ids() || (o.seq_len == 0 && o.vocab == 0), "--seq-len and --vocab are for models of ",
               "token ids; ", o.model, " takes float inputs");
  const int64_t vocab = !model->takes_token_ids() ? 0 : o.vocab > 0 ? o.vocab : model->parameters().entries()[0].shape[0];
  DPCORE_CHECK(!model->takes_token_ids() || vocab >= 2, "--vocab ", vocab, " must be at least 2 (ids from [1, vocab))");
  HostBatch host = random_batch(model->input_shape(), o.batch, model->num_classes(), vocab, o.seed + 1);
  OptimizerConfig optimizer_config;  // torch.optim.SGD(lr=0.01, momentum=0.9), the reference's optimizer
  if (o.optimizer == "adamw") {
    optimizer_config = AdamConfig{1e-3, 0.9, 0.999, 1e-8, 0.01, true};  // torch.optim.AdamW's defaults
  } else {
    optimizer_config = SgdConfig{0.01, 0.9, 0.0, 0.0, false};
  }

  // One model: accumulate_and_step on tensors already on the device, which queues the
  // whole step without reading anything back (as PyTorch's step does not). Replicas: the
  // runner, which scatters the host batch itself.
  std::unique_ptr<train::StepRunner> runner;
  std::unique_ptr<Optimizer> optimizer;
  Tensor x, y;
  if (o.parallel.replicas == 1) {
    std::tie(x, y) = train::batch_tensors(host.view, device);
    optimizer = make_optimizer(model->parameters(), optimizer_config);
  } else {
    runner = train::make_runner(std::move(model), optimizer_config, o.accum, o.parallel);
  }
  // The summed loss of the batch, one element on the device.
  const int64_t counted = train::counted_targets(host.view);
  auto eager_step = [&]() -> Tensor {
    return runner ? runner->step(host.view).loss_sum
                  : train::accumulate_and_step(*model, *optimizer, x, y, o.accum, counted);
  };
  auto mean_loss = [&](const Tensor& loss_sum) { return loss_sum.item() / double(counted); };

  // One model's step is recorded after the warm-up where the backend can (CUDA, unless
  // --cuda-graph off) and replayed over the same x and y: PyTorch's torch.cuda.CUDAGraph
  // mode. The last warm-up step runs on the capture stream (Captured::warm_up, the rule of
  // kernels/cuda_runtime/graph.h: cuDNN's and cuBLAS's first calls on a stream set it up,
  // which a capture forbids). Elsewhere, and for the replicas' runner, the timed steps run
  // as the warm-up did.
  // (Not AdamW's step, whose bias corrections change at every step, nor a model with dropout,
  // whose masks do: SingleDeviceRunner's rules.)
  std::unique_ptr<Backend::Captured> graph =
      !runner && o.warmup > 0 && optimizer->replayable() && !model->draws_random_numbers()
          ? backend_for(device).make_graph(device.index)
          : nullptr;
  double first_loss = 0;
  for (int i = 0; i < o.warmup; ++i) {
    Tensor loss_sum;
    if (graph && i == o.warmup - 1) {
      graph->warm_up([&] { loss_sum = eager_step(); });
    } else {
      loss_sum = eager_step();
    }
    if (i == 0) first_loss = mean_loss(loss_sum);
  }
  // The peak leaves out the warm-up's one-time choices (auto's trial runs, like PyTorch's
  // cudnn.benchmark trials with their large workspaces) and covers the capture and the
  // timed steps; what lives on (parameters, gradients, momentum, the batch, cuBLAS's
  // workspaces) stays counted.
  runtime::synchronize(device);
  runtime::reset_peak_bytes(device);
  const size_t resident_bytes = runtime::bytes_in_use(device);

  // A capture that fails leaves the graph unusable: the timed steps then run eagerly, and
  // the JSON line says "cuda_graph": false.
  Tensor graph_loss_sum;
  if (graph) {
    try {
      graph->record([&] { graph_loss_sum = train::accumulate_and_step(*model, *optimizer, x, y, o.accum, counted); });
    } catch (const std::exception& e) {
      std::cerr << "dpcore_step_bench: warning: " << e.what() << "; the timed steps run eagerly\n";
      graph.reset();
    }
  }
  auto step = [&]() -> Tensor {
    if (!graph) return eager_step();
    graph->replay();
    return graph_loss_sum;
  };

  if (timing) timing->times().clear();
  Tensor first_loss_sum, last_loss_sum;
  if (!o.trace.empty()) trace::start();
  std::vector<double> us = time_steps(device, o.steps, o.block, [&] {
    last_loss_sum = step();
    if (!first_loss_sum.defined()) first_loss_sum = last_loss_sum;
  });
  size_t trace_events = 0;
  if (!o.trace.empty()) {
    trace::stop();
    trace_events = trace::write(o.trace);
  }
  // Read back only now: reading a loss in between would synchronise inside a block.
  if (o.warmup == 0) first_loss = mean_loss(first_loss_sum);
  const double last_loss = mean_loss(last_loss_sum);
  std::sort(us.begin(), us.end());
  const double med = median(us);

  nlohmann::json j = {{"engine", "dpcore"},
                      {"model", o.model},
                      {"input", input},
                      {"batch", o.batch},
                      {"accum", o.accum},
                      {"optimizer", o.optimizer},
                      {"precision", o.precision},
                      {"replicas", o.parallel.replicas},
                      {"device", device.str()},
                      {"threads", o.threads > 0 ? o.threads : runtime::cpu_threads()},
                      {"blas", runtime::blas_description()},
                      {"steps", o.steps},
                      {"warmup", o.warmup},
                      {"timing", device.is_cuda() ? "cuda events, blocks of " + std::to_string(o.block) + " steps"
                                                  : std::string("host clock, each step")},
                      {"median_us", med},
                      {"p10_us", percentile(us, 10)},
                      {"p90_us", percentile(us, 90)},
                      {"samples_per_s", double(o.batch) / (med * 1e-6)},
                      {"peak_bytes", runtime::peak_bytes(device)},
                      {"resident_bytes", resident_bytes},
                      {"first_loss", first_loss},
                      {"last_loss", last_loss},
                      {"cuda_graph", graph != nullptr},
                      {"backend_options", backend_options}};
  if (o.parallel.replicas > 1) j["mode"] = o.parallel.mode;
  if (!o.trace.empty()) j["trace_events"] = trace_events;
  if (timing) {
    double mean = 0;
    for (double v : us) mean += v / double(us.size());
    j["mean_us"] = mean;
    j["profile"] = profile_json(timing->times(), o.steps, mean);
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  dpcore::runtime::use_native_blas_kernels(argv);  // OpenBLAS's fast kernels (engine/runtime.h)
  CLI::App app{"dpcore_step_bench: times dpcore's training step (zero grads, forward, NLL loss, backward, SGD) "
               "on random data already on the device; prints one JSON line"};
  BenchOptions o;
  CudaFlags cuda;
  app.add_option("--model", o.model,
                 "simplenet, fashioncnn, vggs, resnet8, resnet20, resnet18, resnet34, resnet50, bert-tiny, bert-mini or "
                 "a bert(...) spec")
      ->check(CLI::IsMember(dpcore::layers::reference_model_names()))
      ->capture_default_str();
  app.add_option("--image-size", o.image_size,
                 "the ResNets: square images of this many pixels a side (0: the model's own; the other models take "
                 "only their own)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "models of token ids: ids per sample (0: the model's own, 128 for BERT)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "models of token ids: ids drawn from [1, VOCAB) (0: the model's vocabulary)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd (lr 0.01, momentum 0.9) or adamw (torch.optim.AdamW's defaults)")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "fp32, or bf16: the forward under autocast in bfloat16, as dpcore train --precision bf16 and "
                 "torch.autocast(\"cpu\", torch.bfloat16) (the master weights float32, their 16-bit copy made once "
                 "a step)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "samples per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--accum", o.accum, "gradient accumulation micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--block", o.block, "on a GPU: timed steps run back to back between two CUDA events")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads for the kernels (0: all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the initial weights and the random batch")->capture_default_str();
  app.add_option("--replicas", o.parallel.replicas, "data-parallel replicas on the device")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--mode", o.parallel.mode, "with --replicas > 1: dp or ddp")
      ->check(CLI::IsMember({"dp", "ddp"}))
      ->capture_default_str();
  app.add_option("--backend", o.parallel.backend,
                 "with --replicas > 1: local (threads in this process) or mpi (under mpirun, one replica per rank)")
      ->check(CLI::IsMember({"local", "mpi"}))
      ->capture_default_str();
  app.add_option("--sync", o.parallel.sync,
                 "with --replicas > 1: full, local:K (each replica steps alone, averaging every K steps) or async")
      ->capture_default_str();
  app.add_option("--trace", o.trace, "record the timed steps into this Chrome trace file (the cost of tracing on)");
  app.add_flag("--profile", o.profile,
               "also time every kernel call and allocation (CPU, one replica): per-op microseconds per step");
  cuda.add_to(app);
  CLI11_PARSE(app, argc, argv);

  try {
    std::cout << run(o, cuda).dump() << std::endl;
  } catch (const dpcore::Error& e) {
    std::cerr << "dpcore_step_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
