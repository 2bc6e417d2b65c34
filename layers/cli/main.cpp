// The dpcore command line: `dpcore train` and `dpcore eval`. Flags are parsed by CLI11;
// everything they set is a field of nn::TrainOptions / nn::EvalOptions.
#include <CLI/CLI.hpp>

#include <iostream>

#include "engine/backend.h"
#include "engine/error.h"
#include "layers/train/trainer.h"

namespace {

using dpcore::nn::EvalOptions;
using dpcore::nn::TrainOptions;

const char* kModelHelp =
    "simplenet, fashioncnn, vggs, or a layer spec such as \"conv(16,3,p1) relu pool(2) flatten linear(10)\" "
    "(layers: conv(OUT,K[,sS][,pP]) pool(K[,sS][,pP]) linear(OUT) relu flatten view(D1,...) logsoftmax)";
const char* kDataHelp =
    "fashion-mnist[:DIR] (IDX files, gzipped or not; default DIR /usr/share/datasets/fashion-mnist), "
    "cifar10:DIR (data_batch_*.bin, test_batch.bin), or synthetic:C,H,W,CLASSES,N";

// Backend-specific options (CUDA engines, TF32, CUDA graphs), handed to the backend of
// the chosen device. A backend rejects options it does not know, naming them.
struct BackendFlags {
  // The defaults are the backend's own (kernels/cuda/engine_select.h): cuDNN and cuBLAS in FP32,
  // deterministic algorithms only.
  std::string conv_engine = "cudnn", gemm_engine = "cublas", cuda_graph = "on";
  bool tf32 = false;
  void add_to(CLI::App& cmd) {
    cmd.add_option("--conv-engine", conv_engine, "CUDA convolution engine: hand (our kernels), cudnn, or auto (time both once per shape)")
        ->check(CLI::IsMember({"hand", "cudnn", "auto"}))
        ->capture_default_str();
    cmd.add_option("--gemm-engine", gemm_engine, "CUDA matrix-product engine: hand, cublas, or auto")
        ->check(CLI::IsMember({"hand", "cublas", "auto"}))
        ->capture_default_str();
    cmd.add_flag("--tf32", tf32, "allow TF32 tensor-core math in cuDNN and cuBLAS (FP32 by default)");
    cmd.add_option("--cuda-graph", cuda_graph, "capture the whole training step into a CUDA graph after warm-up")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
  }
  void apply(const std::string& device) const {
    dpcore::Backend* cuda = dpcore::find_backend(dpcore::Device::Type::CUDA);
    if (!cuda) return;  // a CPU-only build: the flags have nothing to configure
    cuda->set_option("conv-engine", conv_engine);
    cuda->set_option("gemm-engine", gemm_engine);
    cuda->set_option("tf32", tf32 ? "on" : "off");
    cuda->set_option("cuda-graph", cuda_graph);
  }
};

void add_train_flags(CLI::App& cmd, TrainOptions& o, BackendFlags& b) {
  cmd.add_option("--model", o.model, kModelHelp)->capture_default_str();
  cmd.add_option("--data", o.data, kDataHelp)->capture_default_str();
  cmd.add_option("--epochs", o.epochs, "passes over the training set")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--steps", o.steps, "total optimizer steps (overrides --epochs; with --resume, the total to reach)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--batch", o.batch, "samples per optimizer step; --accum and --replicas split it, never change it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--accum", o.accum, "gradient accumulation micro-batches per step")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--lr", o.sgd.lr, "SGD learning rate")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd.add_option("--momentum", o.sgd.momentum, "SGD momentum")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd.add_option("--dampening", o.sgd.dampening, "SGD momentum dampening")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd.add_flag("--nesterov", o.sgd.nesterov, "Nesterov momentum");
  cmd.add_option("--weight-decay", o.sgd.weight_decay, "L2 penalty added to the gradient (PyTorch's weight_decay)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed for initialisation and shuffling")->capture_default_str();
  cmd.add_flag("--no-shuffle", [&o](int64_t) { o.shuffle = false; }, "take samples in file order");
  cmd.add_flag("--no-normalize", [&o](int64_t) { o.normalize = false; },
               "feed pixels scaled to [0, 1] (default: standardise each channel with the train set's statistics)");
  cmd.add_flag("--drop-last", o.drop_last, "drop the last partial batch of each epoch (default: keep it)");
  cmd.add_option("--device", o.device, "cpu, cuda, cuda:N, or auto (the best device present)")->capture_default_str();
  cmd.add_option("--threads", o.threads, "CPU threads for the kernels (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd.add_option("--init", o.init, "start from these weights (safetensors, PyTorch state_dict names)");
  cmd.add_option("--save", o.save, "write the final weights here (safetensors)");
  cmd.add_option("--checkpoint", o.checkpoint_dir, "directory for DIR/checkpoint.safetensors (written at the end)");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "also write a checkpoint every N steps")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--resume", o.resume, "continue exactly where the checkpoint in --checkpoint DIR stopped");
  cmd.add_option("--metrics", o.metrics, "append one JSON object per epoch to this JSONL file");
  cmd.add_option("--progress", o.progress, "1: progress bar, 0: plain lines, -1: bar on a terminal")
      ->check(CLI::Range(-1, 1));
  cmd.add_option("--replicas", o.parallel.replicas, "data-parallel replicas (R)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--mode", o.parallel.mode, "dp (nn.DataParallel made explicit) or ddp (one worker per replica, bucketed overlap)")
      ->check(CLI::IsMember({"dp", "ddp"}))
      ->capture_default_str();
  cmd.add_option("--backend", o.parallel.backend, "communicator: local (threads in this process), nccl, or mpi (under mpirun)")
      ->check(CLI::IsMember({"local", "nccl", "mpi"}))
      ->capture_default_str();
  cmd.add_option("--split", o.parallel.split, "how the batch is shared: even, weights:3,1,..., or adaptive")->capture_default_str();
  cmd.add_option("--bucket-mb", o.parallel.bucket_mb, "DDP allreduce bucket cap in MiB (the first bucket is 1 MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--replica-timeout", o.parallel.timeout_s, "seconds before a silent replica fails the run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  b.add_to(cmd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpcore: a lean data-parallel training engine (C++17/CUDA, no framework inside)"};
  app.require_subcommand(1);

  TrainOptions train;
  BackendFlags train_backend;
  CLI::App* train_cmd = app.add_subcommand("train", "train a model (default: fashioncnn on Fashion-MNIST, best device)");
  add_train_flags(*train_cmd, train, train_backend);

  EvalOptions eval;
  BackendFlags eval_backend;
  CLI::App* eval_cmd = app.add_subcommand("eval", "print test loss and accuracy of saved weights");
  eval_cmd->add_option("--model", eval.model, kModelHelp)->capture_default_str();
  eval_cmd->add_option("--init", eval.init, "weights to evaluate (safetensors)")->required();
  eval_cmd->add_option("--data", eval.data, kDataHelp)->capture_default_str();
  eval_cmd->add_flag("--no-normalize", [&eval](int64_t) { eval.normalize = false; }, "as for train");
  eval_cmd->add_option("--device", eval.device, "cpu, cuda, cuda:N, or auto")->capture_default_str();
  eval_cmd->add_option("--batch", eval.batch, "evaluation batch size")->check(CLI::PositiveNumber)->capture_default_str();
  eval_cmd->add_option("--threads", eval.threads, "CPU threads")->check(CLI::NonNegativeNumber);
  eval_backend.add_to(*eval_cmd);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train_cmd) {
      train_backend.apply(train.device);
      dpcore::nn::train(train, std::cout);
    } else {
      eval_backend.apply(eval.device);
      dpcore::nn::evaluate(eval, std::cout);
    }
  } catch (const dpcore::Error& e) {
    std::cerr << "dpcore: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
