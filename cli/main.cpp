// The dpcore command line: `dpcore train` and `dpcore eval`. Flags are parsed by CLI11;
// everything they set is a field of train::TrainOptions / train::EvalOptions.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/classify_command.h"
#include "cli/launch.h"
#include "cli/tokenize_command.h"
#include "cli/vocab_command.h"
#include "comm/communicator.h"
#include "engine/backend.h"
#include "engine/device.h"
#include "engine/runtime.h"
#include "kernels/error.h"
#include "train/faults/fault_injection.h"
#include "train/schedule/lr_schedule.h"
#include "train/schedule/recipe.h"
#include "train/predict/predict.h"
#include "train/trainer.h"

namespace {

using dpcore::train::EvalOptions;
using dpcore::train::TrainOptions;

const char* kModelHelp =
    "simplenet, fashioncnn, vggs, resnet8, resnet20 (CIFAR ResNets for the data's image shape; they come with "
    "training defaults for the flags not given: --epochs 10 --batch 128 --lr 0.1 --momentum 0.9 --nesterov "
    "--weight-decay 5e-4 --lr-schedule onecycle with a 15% warm-up, --augment none; Nesterov off: --nesterov=false, "
    "no warm-up: --lr-schedule cosine --warmup-steps 0), or a layer spec such as "
    "\"conv(16,3,p1) relu pool(2) flatten linear(10)\" (layers: conv(OUT,K[,sS][,pP][,nobias]) pool(K[,sS][,pP]) "
    "avgpool(K[,sS][,pP]) gap bn res(OUT[,sS]) linear(OUT) relu flatten view(D1,...) logsoftmax; on [N, T, E]: "
    "encoder(heads=H[,ff=F][,dropout=P][,gelu][,norm_first][,causal]) meanpool, e.g. images as rows of tokens: "
    "\"view(-1,28,28) encoder(heads=4,ff=64) meanpool linear(10)\")";
const char* kAugmentHelp =
    "training-time augmentation, done by the loader thread (never at evaluation): none, or crop:PAD and/or flip "
    "joined by a comma, e.g. crop:4,flip. crop:PAD = torchvision RandomCrop(size=image, padding=PAD) on the raw "
    "image (padding pixels of 0, before normalisation); flip = RandomHorizontalFlip(p=0.5); crop is applied first. "
    "Draws depend only on --seed, the epoch and the sample's position in it, so --resume repeats them";
const char* kLrScheduleHelp =
    "learning rate per optimizer step t of T (PyTorch equivalent, stepped once per step): constant; "
    "step:EPOCHS:GAMMA = lr * GAMMA^floor(t / (EPOCHS * steps per epoch)) (StepLR(step_size=EPOCHS, gamma=GAMMA) "
    "stepped per epoch); cosine = lr * (1 + cos(pi * t / T)) / 2 (CosineAnnealingLR(T_max=T, eta_min=0)); "
    "onecycle = OneCycleLR(max_lr=lr, total_steps=T, pct_start=0.3 or W/T with --warmup-steps W): lr/25 up to lr, "
    "then half-cosine down to lr/25/1e4, momentum 0.95 -> 0.85 -> 0.95 when --momentum > 0 (else not cycled); "
    "linear = transformers' get_linear_schedule_with_warmup(num_warmup_steps=W, num_training_steps=T): "
    "lr * t/W for t < W, then lr * max(0, (T-t)/(T-W)). "
    "Resumes exactly: the rate is a function of the step count";
const char* kWarmupHelp =
    "linear warm-up: lr * (t+1)/W for the first W steps, then the schedule counting from step W (cosine over T-W); "
    "PyTorch: SequentialLR([LambdaLR(lambda t: min(1, (t+1)/W)), schedule], milestones=[W]). With onecycle: "
    "pct_start = W/T; with linear, its own warm-up from 0 (lr * t/W). Must be less than the run's steps. The ResNets (--model) default to 15% of the run's steps; "
    "with onecycle, 0 gives its own pct_start 0.3 (the rise from lr/25 is the schedule), so no warm-up: "
    "--lr-schedule cosine --warmup-steps 0 (or constant)";
const char* kDataHelp =
    "fashion-mnist[:DIR] (IDX files, gzipped or not; default DIR /usr/share/datasets/fashion-mnist), "
    "cifar10:DIR (data_batch_*.bin, test_batch.bin), synthetic:C,H,W,CLASSES,N, or imagefolder:DIR (JPEG and PNG "
    "images in torchvision's ImageFolder layout, DIR/<class>/<image>, decoded as PIL's convert(\"RGB\"), all of one "
    "size unless --transform resizes them; its test set is --val-data, or without it the same images; docs/image-folders.md), or labelled text: "
    "fortunes-lang, fortunes-topic (Debian's fortune databases), text:FILE.tsv (label<TAB>text lines) or text:DIR "
    "(DIR/<class>/*.txt), tokenized once with --vocab into [CLS] ... [SEP] ids (docs/text.md)";

const char* kTransformHelp =
    "imagefolder only: torchvision's transforms for the training images, applied on the --workers threads, e.g. "
    "\"RandomResizedCrop(224),RandomHorizontalFlip(),ToTensor(),Normalize(imagenet)\" (Resize, CenterCrop, "
    "RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize; docs/image-folders.md). With it, the images are "
    "normalised only by its Normalize. Default: ToTensor(), then the train set's statistics";
const char* kValTransformHelp =
    "imagefolder only: the transforms for the test images, e.g. \"Resize(256),CenterCrop(224),ToTensor(),"
    "Normalize(imagenet)\" (no random steps); default: ToTensor() and --transform's Normalize";

const char* kWorkersHelp =
    "threads decoding the images of an image folder, once, at the start (the data does not depend on the count)";
const char* kSkipBadImagesHelp =
    "leave out the image files of an image folder that do not decode (corrupt, truncated, not JPEG or PNG), and "
    "print how many; default: such a file stops the run, named";

// ---------------------------------------------------------------- flag rules
// Every flag value is checked here, before anything runs, and a rejected one is refused
// in words: "--batch 0: must be a whole number of at least 1". The rules run on the text
// of the value, before CLI11 converts it, so no value ever reaches CLI11's own range or
// conversion messages ("Value 0 not in range 0.000000 to 1797693134862315...").

// Thrown by a rule. Not a CLI::ValidationError (CLI11 would put "--batch: " in front of
// the message): a ParseError of its own, so CLI11_PARSE prints it as it is and exits non-zero.
class FlagError : public CLI::ParseError {
 public:
  explicit FlagError(const std::string& message)
      : CLI::ParseError("FlagError", message, CLI::ExitCodes::ValidationError) {}
};

// What a flag needs, in words ("a whole number of at least 1"), by flag name: also used to
// explain a flag given without a value.
std::map<std::string, std::string>& flag_needs() {
  static std::map<std::string, std::string> needs;
  return needs;
}

// A rule: the words for what the flag needs; check(value) returns "" when the value is
// accepted, else those words (or more precise ones, such as the upper end of a range).
struct Rule {
  std::string needs;
  std::string help;  // shown after the type in --help: "INT:POSITIVE"
  std::function<std::string(const std::string&)> check;
};

std::string shown(const std::string& value) { return value.empty() ? "\"\"" : value; }

CLI::Option* with_rule(CLI::Option* option, const Rule& rule) {
  const std::string flag = option->get_name();
  flag_needs()[flag] = rule.needs;
  option->check(CLI::Validator(
      [flag, rule](std::string& value) -> std::string {
        std::string needs = rule.check(value);
        if (!needs.empty()) throw FlagError(flag + " " + shown(value) + ": must be " + needs);
        return "";
      },
      rule.help));
  return option;
}

// A whole number in [lo, hi] (hi: the largest value the option's field can hold).
template <class Int>
Rule whole(Int lo, Int hi = std::numeric_limits<Int>::max()) {
  std::string at_least = "a whole number of at least " + std::to_string(lo);
  std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  bool bounded = hi != std::numeric_limits<Int>::max();
  std::string needs = bounded ? range : at_least;
  std::string help = lo == 0 ? "NONNEGATIVE" : lo == 1 ? "POSITIVE" : "";
  return {needs, help, [=](const std::string& text) -> std::string {
            Int v{};
            const char* end = text.data() + text.size();
            auto [stop, err] = std::from_chars(text.data(), end, v);
            if (text.empty() || stop != end) return needs;
            if (err == std::errc::result_out_of_range) {  // all digits, too large (or too small)
              return text[0] == '-' ? needs : range;
            }
            if (err != std::errc() || v < lo) return needs;
            if (v > hi) return range;
            return "";
          }};
}

// A finite number >= lo (or > lo), and at most hi.
Rule number(double lo, bool lo_allowed, double hi = HUGE_VAL, const std::string& unit = "") {
  std::ostringstream words;
  words.precision(15);  // 1048576, not 1.04858e+06
  words << "a finite number" << unit << (lo_allowed ? " >= " : " > ") << lo;
  if (hi != HUGE_VAL) words << " and at most " << hi;
  std::string needs = words.str();
  std::string help = lo == 0 ? (lo_allowed ? "NONNEGATIVE" : "POSITIVE") : "";
  return {needs, help, [=](const std::string& text) -> std::string {
            const char* begin = text.c_str();
            char* end = nullptr;
            double v = std::strtod(begin, &end);  // overflow gives inf: refused below
            bool parsed = !text.empty() && end == begin + text.size() && !std::isspace(static_cast<unsigned char>(text[0]));
            if (!parsed || !std::isfinite(v)) return needs;
            if (lo_allowed ? v < lo : v <= lo) return needs;
            if (v > hi) return needs;
            return "";
          }};
}

// One of a few words (listed in `needs` when it is empty).
Rule one_of(const std::vector<std::string>& choices, std::string needs = "") {
  std::string help = "{";
  for (size_t i = 0; i < choices.size(); ++i) help += (i ? "," : "") + choices[i];
  help += "}";
  if (needs.empty()) {
    needs = "one of ";
    for (size_t i = 0; i < choices.size(); ++i) needs += (i ? ", " : "") + choices[i];
  }
  return {needs, help, [=](const std::string& text) -> std::string {
            return std::find(choices.begin(), choices.end(), text) == choices.end() ? needs : "";
          }};
}

// --lr-schedule: the words train/schedule/lr_schedule.h uses for what is wrong.
Rule lr_schedule_rule() {
  return {"constant, step:EPOCHS:GAMMA, cosine, onecycle or linear", "", [](const std::string& text) {
            return dpcore::train::lr_schedule_needs(text);
          }};
}

// --betas B1,B2: two numbers, each in [0, 1), as torch.optim.Adam requires (at 1 the bias
// correction divides by zero).
Rule betas_rule() {
  const Rule beta = number(0, true, 1);
  std::string needs = "two numbers B1,B2, each in [0, 1)";
  return {needs, "B1,B2", [=](const std::string& text) -> std::string {
            const size_t comma = text.find(',');
            if (comma == std::string::npos) return needs;
            for (const std::string& b : {text.substr(0, comma), text.substr(comma + 1)}) {
              if (!beta.check(b).empty() || std::strtod(b.c_str(), nullptr) >= 1) return needs;
            }
            return "";
          }};
}

// cpu, cuda, cuda:N or auto: what dpcore::Device::parse takes, plus auto.
Rule device_rule() {
  std::string needs = "cpu, cuda, cuda:N (N a GPU index from 0) or auto";
  return {needs, "", [=](const std::string& text) -> std::string {
            if (text == "auto") return "";
            try {
              dpcore::Device::parse(text);
              return "";
            } catch (const std::exception&) {
              return needs;
            }
          }};
}

// CLI11's own parse errors (a flag without its value, given twice, a switch given a value,
// a required flag missing), in the same words as the rules.
std::string explain_parse_error(const CLI::App* app, const CLI::Error& e) {
  std::string message = e.what();
  auto flag_before = [&](char stop) { return message.substr(0, message.find(stop)); };
  auto needs_of = [&](const std::string& flag) {
    auto it = flag_needs().find(flag);
    return it == flag_needs().end() ? std::string() : ": " + it->second;
  };
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    std::string flag = flag_before(':');
    if (message.find("At Most") != std::string::npos) {
      message = flag + " is given more than once: give it once";
    } else if (message.find("missing") != std::string::npos || message.find("required") != std::string::npos) {
      message = flag + " needs a value" + needs_of(flag);
    }
  } else if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    // "Could not convert: --nesterov = maybe" (only switches get here: rules check the rest)
    const std::string prefix = "Could not convert: ";
    if (message.rfind(prefix, 0) == 0) {
      std::string rest = message.substr(prefix.size());
      size_t eq = rest.find(" = ");
      std::string flag = rest.substr(0, eq), value = eq == std::string::npos ? "" : rest.substr(eq + 3);
      message = flag + "=" + value + ": must be given alone (a switch takes no value)";
    } else if (message.find("Should be true/false") != std::string::npos) {
      message = flag_before(':') + ": must be given alone (a switch takes no value)";
    }
  } else if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    // "--init is required": say what it takes.
    for (const CLI::App* sub : app->get_subcommands()) {
      for (const CLI::Option* option : sub->get_options()) {
        if (message == option->get_name() + " is required") message += ": " + option->get_description();
      }
    }
  }
  // `dpcore launch -n 2 train --steps 5`: the train flags reach launch's parser without --.
  const CLI::App* launch = app->get_subcommand_ptr("launch").get();
  if (launch && launch->parsed() && message.rfind("The following argument", 0) == 0) {
    message += " (put -- before the command: dpcore launch -n N -- train FLAGS...)";
  }
  return "dpcore: error: " + message + "\nRun with --help for more information.\n";
}

// Backend-specific options (CUDA engines, TF32, CUDA graphs), handed to the backend of
// the chosen device. A backend rejects options it does not know, naming them.
struct BackendFlags {
  // The engines default to the backend's own (kernels/cuda_libraries/engine_config.h):
  // cuDNN and cuBLAS in FP32, deterministic algorithms only, where the build has them; the
  // hand kernels in the host build (DPCORE_CUDA=HOST). Empty: not given.
  std::string conv_engine, gemm_engine, cuda_graph = "on";
  bool tf32 = false;
  void add_to(CLI::App& cmd) {
    with_rule(cmd.add_option("--conv-engine", conv_engine,
                             "CUDA convolution engine: hand (our kernels), cudnn, or auto (time both once per shape); "
                             "default cudnn (hand in a build without cuDNN)"),
              one_of({"hand", "cudnn", "auto"}));
    with_rule(cmd.add_option("--gemm-engine", gemm_engine,
                             "CUDA matrix-product engine: hand, cublas, or auto; default cublas (hand in a build without "
                             "cuBLAS)"),
              one_of({"hand", "cublas", "auto"}));
    cmd.add_flag("--tf32", tf32, "allow TF32 tensor-core math in cuDNN and cuBLAS (FP32 by default)");
    with_rule(cmd.add_option("--cuda-graph", cuda_graph, "capture the whole training step into a CUDA graph after warm-up"),
              one_of({"on", "off"}))
        ->capture_default_str();
  }
  // The settings apply to every CUDA device (the engines are chosen per process).
  void apply() const {
    dpcore::Backend* cuda = dpcore::find_backend(dpcore::Device::Type::CUDA);
    if (!cuda) return;  // a CPU-only build: the flags have nothing to configure
    if (!conv_engine.empty()) cuda->set_option("conv-engine", conv_engine);
    if (!gemm_engine.empty()) cuda->set_option("gemm-engine", gemm_engine);
    cuda->set_option("tf32", tf32 ? "on" : "off");
    cuda->set_option("cuda-graph", cuda_graph);
  }
};

// How the texts of a text --data become token ids (engine/data/spec.h), for train and eval.
void add_text_flags(CLI::App& cmd, dpcore::data::TextOptions& t) {
  cmd.add_option("--vocab", t.vocab,
                 std::string("text data: the WordPiece vocabulary (Hugging Face's vocab.txt); default the committed ") +
                     dpcore::data::kDefaultVocab);
  with_rule(cmd.add_option("--max-len", t.max_len,
                           "text data: the most tokens of a text, [CLS] and [SEP] included; a longer text stops the "
                           "run, named, unless --truncate (batches are padded to their longest text, not to this)"),
            whole<int64_t>(2))
      ->capture_default_str();
  cmd.add_flag("--truncate", t.truncate, "text data: keep the first --max-len tokens of a longer text");
}

// Faults to inject and the guards against bad steps (docs/fault-tolerance.md).
void add_fault_tolerance_flags(CLI::App& cmd, TrainOptions& o) {
  cmd.add_option_function<std::vector<std::string>>(
         "--inject",
         [&o](const std::vector<std::string>& specs) {
           std::vector<dpcore::train::Fault> faults = o.parallel.faults.faults();
           for (const std::string& spec : specs) {
             try {
               for (const auto& f : dpcore::train::parse_faults(spec, "--inject")) faults.push_back(f);
             } catch (const dpcore::Error& e) {
               throw FlagError(e.what());
             }
           }
           o.parallel.faults = dpcore::train::FaultInjector(std::move(faults));
         },
         "make a replica fail at a step, to try recovery and the guards (repeatable; also read from the environment "
         "variable DPCORE_INJECT, ';' between faults): KIND:replica=R,step=S[,factor=F], KIND throw, throw-after-step "
         "(after its optimizer step), hang, exit, nan (NaN gradients), bitflip (one bit of the first parameter), "
         "slow (compute takes F times as long from step S, default 1), e.g. nan:replica=1,step=3 "
         "(docs/fault-tolerance.md)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI::Option* skip = cmd.add_flag("--skip-nonfinite", o.parallel.guards.skip_nonfinite,
                                   "skip a step whose global loss or reduced gradient holds a NaN or Inf on every "
                                   "replica alike (parameters and optimizer state unchanged), log and count it");
  with_rule(cmd.add_option("--max-skipped", o.parallel.guards.max_skipped,
                           "--skip-nonfinite: stop the run when this many steps in a row were skipped"),
            whole<int64_t>(1))
      ->capture_default_str()
      ->needs(skip);
  with_rule(cmd.add_option("--check-replicas", o.parallel.guards.check_replicas,
                           "every N steps, compare bit checksums of the replicas' parameters and momentum and stop "
                           "naming the replica and the first tensor that differ (0: never)"),
            whole<int64_t>(0))
      ->capture_default_str();
  with_rule(cmd.add_option("--on-replica-failure", o.parallel.failure.on_failure,
                           "when a replica fails in a step (it throws, or misses --replica-timeout): stop (the run "
                           "fails naming it) or shrink (the step is undone and runs again over the same batch "
                           "without it; --backend local, --sync full)"),
            one_of({"stop", "shrink"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--min-replicas", o.parallel.failure.min_replicas,
                           "--on-replica-failure shrink: rather than go on with fewer replicas than this, stop "
                           "(after a checkpoint of the last completed step, with --checkpoint)"),
            whole<int>(1))
      ->capture_default_str();
}

void add_train_flags(CLI::App& cmd, TrainOptions& o, BackendFlags& b) {
  const Rule rate = number(0, true);  // PyTorch's SGD refuses negative values; nan and inf make no sense
  cmd.add_option("--model", o.model, kModelHelp)->capture_default_str();
  cmd.add_option("--data", o.data, kDataHelp)->capture_default_str();
  cmd.add_option("--val-data", o.val_data,
                 "imagefolder:DIR: the test set of --data imagefolder:DIR (the same class folders); default: the "
                 "training images");
  with_rule(cmd.add_option("--workers", o.workers, kWorkersHelp), whole<int>(1))->capture_default_str();
  cmd.add_flag("--skip-bad-images", o.skip_bad_images, kSkipBadImagesHelp);
  add_text_flags(cmd, o.text);
  cmd.add_flag("--bucket-by-length", o.bucket_by_length,
               "text data: cut each epoch's (seeded) order into windows of 50 batches and sort each by length, so a "
               "batch holds texts of similar lengths and little padding (deterministic; docs/text.md)");
  with_rule(cmd.add_option("--task", o.task,
                           "what a text model learns: classify (a class per text, the default) or mlm (BERT's "
                           "masked-LM pretraining: a masked token's id, the data's labels unused; docs/text.md)"),
            one_of({"classify", "mlm"}))
      ->capture_default_str();
  cmd.add_option("--transform", o.transform, kTransformHelp);
  cmd.add_option("--val-transform", o.val_transform, kValTransformHelp);
  with_rule(cmd.add_option("--epochs", o.epochs, "passes over the training set"), whole<int64_t>(1))->capture_default_str();
  with_rule(cmd.add_option("--steps", o.steps, "total optimizer steps (overrides --epochs; with --resume, the total to reach)"),
            whole<int64_t>(0));
  with_rule(cmd.add_option("--batch", o.batch, "samples per optimizer step; --accum and --replicas split it, never change it"),
            whole<int64_t>(1))
      ->capture_default_str();
  with_rule(cmd.add_option("--accum", o.accum,
                                         "gradient accumulation micro-batches per step (with batch norm NOT the same "
                                         "as one batch A times larger: each micro-batch normalises with its own "
                                         "statistics, as in PyTorch)"), whole<int64_t>(1))
      ->capture_default_str();
  with_rule(cmd.add_option("--optimizer", o.optimizer,
                           "sgd (torch.optim.SGD), adam (torch.optim.Adam) or adamw (torch.optim.AdamW, decoupled "
                           "weight decay); adam and adamw take PyTorch's defaults: --lr 0.001, --betas 0.9,0.999, "
                           "--eps 1e-8, --weight-decay 0 (adam) or 0.01 (adamw)"),
            one_of({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--precision", o.precision,
                           "fp32, bf16 or fp16: autocast (torch.autocast) in bfloat16 or float16, linear layers, "
                           "matrix products, convolutions and attention on 16-bit operands with float32 "
                           "accumulation, everything else in float32, the master weights, gradients and optimizer "
                           "state float32; fp16 with dynamic loss scaling (torch.amp.GradScaler's defaults: scale "
                           "65536, halved after a step with an Inf or NaN gradient, which is skipped, doubled after "
                           "2000 clean steps) (docs/mixed-precision.md)"),
            one_of({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--lr", o.sgd.lr, "learning rate (with --optimizer adam or adamw, 0.001 unless given)"), rate)
      ->capture_default_str();
  with_rule(cmd.add_option_function<std::string>(
                "--betas",
                [&o](const std::string& text) {
                  const size_t comma = text.find(',');
                  o.adam.beta1 = std::strtod(text.substr(0, comma).c_str(), nullptr);
                  o.adam.beta2 = std::strtod(text.substr(comma + 1).c_str(), nullptr);
                },
                "Adam's and AdamW's coefficients of the running averages of the gradient and its square (default "
                "0.9,0.999)"),
            betas_rule());
  with_rule(cmd.add_option("--eps", o.adam.eps, "Adam's and AdamW's term added to the denominator (default 1e-8)"),
            number(0, false));
  with_rule(cmd.add_option("--clip-grad-norm", o.clip_grad_norm,
                           "before every step, scale the (reduced) gradient to this L2 norm when it is larger, as "
                           "torch.nn.utils.clip_grad_norm_ (the norm in --metrics as grad_norm); default: no clipping"),
            number(0, true));
  with_rule(cmd.add_option("--momentum", o.sgd.momentum, "SGD momentum"), rate)->capture_default_str();
  with_rule(cmd.add_option("--dampening", o.sgd.dampening, "SGD momentum dampening"), rate)->capture_default_str();
  cmd.add_flag("--nesterov", o.sgd.nesterov,
               "Nesterov momentum (needs --momentum > 0 and --dampening 0); on by default for the ResNets (--model), "
               "off: --nesterov=false");
  with_rule(cmd.add_option("--lr-schedule", o.lr_schedule, kLrScheduleHelp), lr_schedule_rule())->capture_default_str();
  with_rule(cmd.add_option("--warmup-steps", o.warmup_steps, kWarmupHelp), whole<int64_t>(0))->capture_default_str();
  with_rule(cmd.add_option("--weight-decay", o.sgd.weight_decay,
                           "PyTorch's weight_decay: with sgd and adam an L2 penalty added to the gradient, with adamw "
                           "decoupled (each step scales the parameters by 1 - lr*weight_decay; 0.01 unless given)"
                           "never on biases and norm weights under adam and adamw"),
            rate)
      ->capture_default_str();
  with_rule(cmd.add_option("--seed", o.seed, "seed for initialisation and shuffling"), whole<uint64_t>(0))
      ->capture_default_str();
  cmd.add_flag_callback("--no-shuffle", [&o] { o.shuffle = false; }, "take samples in file order");
  cmd.add_flag_callback("--no-normalize", [&o] { o.normalize = false; },
               "feed pixels scaled to [0, 1] (default: standardise each channel with the train set's statistics)");
  cmd.add_flag("--drop-last", o.drop_last, "drop the last partial batch of each epoch (default: keep it)");
  cmd.add_option("--augment", o.augment, kAugmentHelp)->capture_default_str();
  with_rule(cmd.add_option("--device", o.device, "cpu, cuda, cuda:N, or auto (the best device present)"), device_rule())
      ->capture_default_str();
  with_rule(cmd.add_option("--threads", o.threads, "CPU threads for the kernels (0: all cores)"), whole<int>(0));
  cmd.add_option("--init", o.init, "start from these weights (safetensors, PyTorch state_dict names)");
  cmd.add_option("--init-from", o.init_from,
                 "fine-tune from these weights (safetensors, Hugging Face's names): the tensors the model shares "
                 "with them loaded, the rest (the head) new, and a report of both (docs/text.md)");
  cmd.add_flag("--convert-weights", o.convert_weights,
               "let --init or --init-from load bfloat16 / float16 weights into the float32 model, converted (and said so)");
  cmd.add_option("--save", o.save, "write the final weights here (safetensors)");
  cmd.add_option("--checkpoint", o.checkpoint_dir, "directory for DIR/checkpoint.safetensors (written at the end)");
  with_rule(cmd.add_option("--checkpoint-every", o.checkpoint_every, "also write a checkpoint every N steps (0: only at the end)"),
            whole<int64_t>(0));
  with_rule(cmd.add_option("--keep-checkpoints", o.keep_checkpoints,
                           "keep the K newest checkpoints: DIR/checkpoint.safetensors and the K-1 before it as "
                           "DIR/checkpoint-STEP.safetensors, the oldest removed once the newest is written"),
            whole<int>(1))
      ->capture_default_str();
  CLI::Option* resume = cmd.add_flag("--resume", o.resume,
                                     "continue exactly where the newest valid checkpoint in --checkpoint DIR stopped, "
                                     "with any replica count, backend or mode (docs/fault-tolerance.md)");
  cmd.add_flag("--force-resume", o.force_resume,
               "resume even where the model, data, --batch, --accum, SGD or schedule differ from the checkpoint's, "
               "logging each change (old -> new)")
      ->needs(resume);
  cmd.add_option("--metrics", o.metrics, "append one JSON object per epoch to this JSONL file");
  with_rule(cmd.add_option("--eval-every", o.eval_every,
                           "also evaluate on the test set every N steps (a line, and a metrics record of kind "
                           "\"eval\"); 0: at the end of each epoch only"),
            whole<int64_t>(0))
      ->capture_default_str();
  CLI::Option* trace = cmd.add_option(
      "--trace", o.trace,
      "write a timeline of --trace-steps training steps (after 2 warm-up steps) to this JSON file: one lane per "
      "replica, communication thread, the main thread and the loader; open it in ui.perfetto.dev or "
      "chrome://tracing (docs/data-parallel.md, \"Watching a step\")");
  with_rule(cmd.add_option("--trace-steps", o.trace_steps, "steps recorded by --trace"), whole<int64_t>(1))
      ->capture_default_str()
      ->needs(trace);
  cmd.add_flag("--nvtx", o.nvtx,
               "also make every span of --trace an NVTX range, for the whole run, so that Nsight Systems (nsys "
               "profile) shows dpcore's names; CUDA builds (docs/data-parallel.md, \"Watching a step\")");
  cmd.add_flag("--explain", o.explain,
               "print the first step move by move with this run's numbers: shares, bytes copied, the loss seed, "
               "buckets, the ring's chunk schedule, the SGD step (docs/data-parallel.md)");
  with_rule(cmd.add_option("--progress", o.progress, "1: progress bar, 0: plain lines, -1: bar on a terminal"),
            one_of({"-1", "0", "1"}, "-1 (a bar on a terminal), 0 (plain lines) or 1 (a bar)"));
  with_rule(cmd.add_option("--log-every", o.log_every,
                           "without a bar: a progress line (the step's mean loss, speed, ETA) every N steps and at "
                           "the last (PyTorch Lightning's log_every_n_steps); 1: every step"),
            whole<int64_t>(1))
      ->capture_default_str();
  with_rule(cmd.add_option("--replicas", o.parallel.replicas, "data-parallel replicas (R)"), whole<int>(1))
      ->capture_default_str();
  with_rule(cmd.add_option("--mode", o.parallel.mode, "dp (nn.DataParallel made explicit) or ddp (one worker per replica, bucketed overlap)"),
            one_of({"dp", "ddp"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--backend", o.parallel.backend, "communicator: local (threads in this process), nccl, or mpi (under mpirun)"),
            one_of({"local", "nccl", "mpi"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--batchnorm", o.parallel.batchnorm,
                           "batch norm over replicas: local (each replica's share's statistics, DDP's default; rank 0's "
                           "running statistics broadcast each step) or sync (SyncBatchNorm: the whole micro-batch's "
                           "statistics, equal to one replica)"),
            one_of({"local", "sync"}))
      ->capture_default_str();
  cmd.add_option("--sync", o.parallel.sync,
                 "how replicas combine their work: full (one synchronous step), local:K (local SGD, parameters "
                 "averaged every K steps) or async (a parameter server in this process; docs/strategies.md)")
      ->capture_default_str();
  with_rule(cmd.add_option("--max-staleness", o.parallel.max_staleness,
                           "--sync async: the most updates a gradient may lag behind the master"),
            whole<int64_t>(0))
      ->capture_default_str();
  cmd.add_option("--split", o.parallel.split, "how the batch is shared: even, weights:3,1,..., or adaptive")->capture_default_str();
  CLI::Option* stages = cmd.add_option("--stages", o.parallel.pipeline.stages,
                                       "a pipeline: which layers run on which stage, e.g. 0-5@cpu:0,6-11@cpu:1 (layers "
                                       "are the model's top-level children, numbered from 0; with --replicas D, D "
                                       "such pipelines, each stage's gradients reduced among its replicas; "
                                       "docs/pipelines.md)");
  with_rule(cmd.add_option("--pipeline", o.parallel.pipeline.balanced_stages,
                           "a pipeline of P stages, the layers split by their forward + backward time measured on "
                           "the first micro-batch (stage i on cpu:i, sharing cores when there are fewer than P; docs/pipelines.md)"),
            whole<int>(1))
      ->excludes(stages);
  cmd.add_option("--schedule", o.parallel.pipeline.schedule,
                 "--stages or --pipeline: naive (the batch whole), gpipe (all forwards, then all backwards) or 1f1b "
                 "(at most P micro-batches of activations per stage)")
      ->capture_default_str();
  with_rule(cmd.add_option("--micro-batches", o.parallel.pipeline.micro_batches,
                           "--stages or --pipeline: micro-batches per step (default one per stage; 1 with naive)"),
            whole<int>(1));
  cmd.add_flag("--recompute", o.parallel.pipeline.recompute,
               "--stages or --pipeline: each stage keeps only its inputs between a micro-batch's forward and its "
               "backward, and runs the forward again there (less activation memory, one more forward)");
  with_rule(cmd.add_option("--stage-memory-mb", o.parallel.pipeline.stage_memory_mb,
                           "--pipeline P: the most MiB of activations a stage may hold under the schedule (the layers' "
                           "measured bytes times its live micro-batches); the balance takes the fastest split within it"),
            number(0, false, 1048576, " of MiB"));
  // Upper ends keep the arithmetic in range: MiB -> bytes in a size_t, seconds -> int64 milliseconds.
  with_rule(cmd.add_option("--bucket-mb", o.parallel.bucket_mb, "DDP allreduce bucket cap in MiB (the first bucket is 1 MiB)"),
            number(0, false, 1048576, " of MiB"))
      ->capture_default_str();
  with_rule(cmd.add_option("--grad-dtype", o.parallel.grad_dtype,
                           "what the gradient allreduce moves (--mode dp or ddp, 2 or more replicas): fp32, or "
                           "bf16 (half the bytes, as DDP's bf16_compress_hook: each bucket rounded to bfloat16 "
                           "and summed in bfloat16, the micro-batches still accumulated and the optimizer still "
                           "stepping in float32) (docs/mixed-precision.md)"),
            one_of({"fp32", "bf16"}))
      ->capture_default_str();
  with_rule(cmd.add_option("--replica-timeout", o.parallel.timeout_s, "seconds before a silent replica fails the run"),
            number(0, false, 1e9, " of seconds"))
      ->capture_default_str();
  add_fault_tolerance_flags(cmd, o);
  b.add_to(cmd);
}

}  // namespace

// The model's training defaults (train/schedule/recipe.h) for every flag the command line left out.
// A recipe's optimizer settings are SGD's: with --optimizer adam or adamw it gives the rest.
void apply_recipe(const CLI::App& cmd, TrainOptions& o) {
  const std::optional<dpcore::train::Recipe> recipe = dpcore::train::model_recipe(o.model);
  if (!recipe) return;
  auto unset = [&cmd](const char* flag) { return cmd.count(flag) == 0; };
  if (unset("--epochs")) o.epochs = recipe->epochs;
  if (unset("--batch")) o.batch = recipe->batch;
  if (o.optimizer == "sgd") {
    if (unset("--lr")) o.sgd.lr = recipe->sgd.lr;
    if (unset("--momentum")) o.sgd.momentum = recipe->sgd.momentum;
    if (unset("--dampening")) o.sgd.dampening = recipe->sgd.dampening;
    if (unset("--nesterov")) o.sgd.nesterov = recipe->sgd.nesterov;
    if (unset("--weight-decay")) o.sgd.weight_decay = recipe->sgd.weight_decay;
  }
  if (unset("--lr-schedule")) o.lr_schedule = recipe->lr_schedule;
  if (unset("--warmup-steps")) o.warmup_fraction = recipe->warmup_fraction;
  if (unset("--augment")) o.augment = recipe->augment;
}

// --optimizer: torch.optim's defaults for adam and adamw where the flag was left out, and
// a refusal of the flags the chosen optimizer does not have.
void apply_optimizer_defaults(const CLI::App& cmd, TrainOptions& o) {
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (o.optimizer == "sgd") {
    for (const char* flag : {"--betas", "--eps"}) {
      DPCORE_CHECK(!given(flag), flag, " is Adam's: give it with --optimizer adam or adamw");
    }
    return;
  }
  for (const char* flag : {"--momentum", "--dampening", "--nesterov"}) {
    DPCORE_CHECK(!given(flag), flag, " is SGD's, not --optimizer ", o.optimizer, "'s (its momentum is --betas B1,B2)");
  }
  if (!given("--lr")) o.sgd.lr = 1e-3;
  if (!given("--weight-decay")) o.sgd.weight_decay = o.optimizer == "adamw" ? 1e-2 : 0.0;
}

// --schedule, --micro-batches and --recompute are a pipeline's: refused without --stages or --pipeline;
// --stage-memory-mb without --pipeline.
void check_pipeline_given(const CLI::App& cmd, const TrainOptions& o) {
  for (const char* flag : {"--schedule", "--micro-batches", "--recompute"})
    DPCORE_CHECK(cmd.count(flag) == 0 || dpcore::train::is_pipeline(o.parallel.pipeline), flag,
                 " is a pipeline's: give it with --stages or --pipeline P");
  DPCORE_CHECK(cmd.count("--stage-memory-mb") == 0 || o.parallel.pipeline.balanced_stages > 0,
               "--stage-memory-mb is --pipeline P's: it bounds the split --pipeline chooses (--stages gives the split)");
}

// `dpcore launch -n N ... -- train ...` (cli/launch.h): the flags before --; what follows
// it is the command to run under mpirun, kept as it is.
CLI::App* add_launch_command(CLI::App& app, dpcore::cli::LaunchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "launch", "run `dpcore train` under mpirun and restart it from its newest checkpoint when a rank dies: "
                "dpcore launch -n N [--max-restarts K] [--min-nproc M] [--mpirun CMD] -- train FLAGS... "
                "(docs/fault-tolerance.md)");
  with_rule(cmd->add_option("-n,--np", o.nproc, "ranks (mpirun -np) of the first attempt"), whole<int>(1))->required();
  with_rule(cmd->add_option("--max-restarts", o.max_restarts, "restarts after failures before giving up"),
            whole<int>(0))
      ->capture_default_str();
  with_rule(cmd->add_option("--min-nproc", o.min_nproc,
                            "fewest ranks: each restart uses one rank fewer than the attempt before, down to this "
                            "(default -n: every attempt uses N)"),
            whole<int>(1));
  cmd->add_option("--mpirun", o.mpirun,
                  "the MPI launcher and its flags, split at spaces, e.g. \"mpirun --oversubscribe\" (default: "
                  "$DPCORE_MPIRUN, else mpirun)");
  cmd->add_option("command", o.command, "after --: train and its flags")->required();
  return cmd;
}

int main(int argc, char** argv) {
  dpcore::runtime::use_native_blas_kernels(argv);  // may run this program again, see engine/runtime.h
  CLI::App app{"dpcore: a lean data-parallel training engine (C++17/CUDA, no framework inside)"};
  app.require_subcommand(1);
  app.failure_message(explain_parse_error);

  TrainOptions train;
  BackendFlags train_backend;
  CLI::App* train_cmd = app.add_subcommand("train", "train a model (default: fashioncnn on Fashion-MNIST, best device)");
  add_train_flags(*train_cmd, train, train_backend);

  EvalOptions eval;
  BackendFlags eval_backend;
  CLI::App* eval_cmd = app.add_subcommand("eval", "print test loss and accuracy of saved weights");
  eval_cmd->add_option("--model", eval.model, kModelHelp)->capture_default_str();
  eval_cmd->add_option("--init", eval.init, "weights to evaluate (safetensors)")->required();
  eval_cmd->add_flag("--convert-weights", eval.convert_weights,
                     "let --init load bfloat16 / float16 weights into the float32 model, converted (and said so)");
  eval_cmd->add_option("--data", eval.data, kDataHelp)->capture_default_str();
  eval_cmd->add_option("--val-data", eval.val_data,
                       "imagefolder:DIR: evaluate on these images, normalised with --data imagefolder:DIR's statistics "
                       "as in training (default: --data's own images and statistics)");
  with_rule(eval_cmd->add_option("--workers", eval.workers, kWorkersHelp), whole<int>(1))->capture_default_str();
  eval_cmd->add_flag("--skip-bad-images", eval.skip_bad_images, kSkipBadImagesHelp);
  add_text_flags(*eval_cmd, eval.text);
  eval_cmd->add_option("--transform", eval.transform, "as in training (its Normalize applies to the test images)");
  eval_cmd->add_option("--val-transform", eval.val_transform, kValTransformHelp);
  eval_cmd->add_flag_callback("--no-normalize", [&eval] { eval.normalize = false; }, "as for train");
  with_rule(eval_cmd->add_option("--device", eval.device, "cpu, cuda, cuda:N, or auto"), device_rule())->capture_default_str();
  with_rule(eval_cmd->add_option("--batch", eval.batch, "evaluation batch size"), whole<int64_t>(1))->capture_default_str();
  with_rule(eval_cmd->add_option("--threads", eval.threads, "CPU threads (0: all cores)"), whole<int>(0));
  eval_backend.add_to(*eval_cmd);

  dpcore::train::PredictOptions predict;
  CLI::App* predict_cmd = app.add_subcommand(
      "predict", "predict the step time and scaling efficiency of data parallelism on a cluster (docs/scaling.md)");
  predict_cmd->add_option("--model", predict.model, std::string(kModelHelp) + "; with --profile, the profile's own model unless given")->capture_default_str();
  predict_cmd->add_option("--input", predict.input, "one sample's shape, CxHxW")->capture_default_str();
  with_rule(predict_cmd->add_option("--classes", predict.classes, "the model's outputs"), whole<int64_t>(1))
      ->capture_default_str();
  with_rule(predict_cmd->add_option("--batch", predict.batch, "samples per replica"), whole<int64_t>(1))
      ->capture_default_str();
  predict_cmd
      ->add_option("--cluster", predict.cluster,
                   "a preset (h200x8-nvlink-ib400, v100x8-nvlink-ib100) or G,A,B,a,b[,C]: replicas per node, then latency (us) and "
                   "bandwidth (GB/s) inside a node and between nodes, and for CPU nodes the cores their replicas "
                   "share")
      ->capture_default_str();
  predict_cmd->add_option("--strategies", predict.strategies, "comma-separated: ddp, dp, local:K")
      ->capture_default_str();
  predict_cmd->add_option("--algorithm", predict.algorithm, "allreduce: ring, tree or best")->capture_default_str();
  with_rule(predict_cmd->add_option("--max-replicas", predict.max_replicas, "predict for 1, 2, 4, ... up to this"),
            whole<int>(1))
      ->capture_default_str();
  predict_cmd->add_option("--replicas", predict.replicas,
                          "comma-separated replica counts to predict instead of --max-replicas's powers of two");
  with_rule(predict_cmd->add_option("--bucket-mb", predict.bucket_mb, "DDP's bucket cap, as for train"),
            number(0, false))
      ->capture_default_str();
  with_rule(predict_cmd->add_option("--compute-scale", predict.compute_scale,
                                    "multiply the profile's times (standing in for a faster device: an assumption)"),
            number(0, false))
      ->capture_default_str();
  with_rule(predict_cmd->add_option("--profile-steps", predict.steps, "timed steps of the measured profile"),
            whole<int>(1))
      ->capture_default_str();
  with_rule(predict_cmd->add_option("--threads", predict.threads, "CPU threads of the measurement (0: all cores)"),
            whole<int>(0));
  with_rule(predict_cmd->add_option("--seed", predict.seed, "initial weights and the random batch"),
            whole<uint64_t>(0));
  predict_cmd->add_option("--profile", predict.profile_in, "load the step profile from this JSON file instead of measuring");
  predict_cmd->add_option("--profile-out", predict.profile_out, "save the measured step profile here (JSON)");
  predict_cmd->add_option("--json", predict.json, "also write the predictions here (JSON)");
  predict_cmd->add_option("--stages", predict.stages,
                          "predict a pipeline's step instead, these stages as for train (e.g. 0-4@cpu:0,5-10@cpu:1); "
                          "--replicas are then each stage's data-parallel replicas (docs/scaling.md, \"Pipelines\")");
  predict_cmd->add_option("--schedule", predict.schedule, "with --stages: naive, gpipe or 1f1b")->capture_default_str();
  with_rule(predict_cmd->add_option("--micro-batches", predict.micro_batches,
                                    "with --stages: micro-batches per step (default one per stage)"),
            whole<int>(1));

  dpcore::cli::LaunchOptions launch;
  CLI::App* launch_cmd = add_launch_command(app, launch);

  dpcore::cli::VocabOptions vocab;
  CLI::App* vocab_cmd = app.add_subcommand(
      "vocab", "build a WordPiece vocabulary (Hugging Face's vocab.txt) from a text dataset's train split (docs/text.md)");
  vocab_cmd->add_option("--data", vocab.data, "fortunes-lang, fortunes-topic, text:FILE.tsv or text:DIR")
      ->capture_default_str();
  with_rule(vocab_cmd->add_option("--vocab-size", vocab.vocab_size, "tokens, special tokens included"),
            whole<int64_t>(1))
      ->required();
  vocab_cmd->add_option("--out", vocab.out, "the vocab.txt to write")->required();

  dpcore::cli::TokenizeOptions tokenize;
  CLI::App* tokenize_cmd = app.add_subcommand(
      "tokenize", "write a text dataset's train and test splits as the token ids train feeds the model, to one "
                  "safetensors file (for training elsewhere on the same input: docs/text.md)");
  tokenize_cmd->add_option("--data", tokenize.data, "fortunes-lang, fortunes-topic, text:FILE.tsv or text:DIR")
      ->capture_default_str();
  add_text_flags(*tokenize_cmd, tokenize.text);
  tokenize_cmd->add_option("--out", tokenize.out, "the .safetensors file to write")->required();

  dpcore::cli::ClassifyOptions classify;
  CLI::App* classify_cmd = app.add_subcommand(
      "classify", "the top classes of texts, with their probabilities, by weights train --save wrote on text data: "
                  "dpcore classify --weights W \"some text\" (or lines on stdin; docs/text.md)");
  classify_cmd->add_option("--weights", classify.weights, "weights of dpcore train --save (safetensors); their class "
                                                          "names are read from beside them, W.class_to_idx.json")
      ->required();
  classify_cmd->add_option("--model", classify.model, "the model the weights are of, as --model of train")
      ->capture_default_str();
  add_text_flags(*classify_cmd, classify.text);
  with_rule(classify_cmd->add_option("--top", classify.top, "classes printed per text"), whole<int64_t>(1))
      ->capture_default_str();
  with_rule(classify_cmd->add_option("--device", classify.device, "cpu, cuda or cuda:N"), device_rule())
      ->capture_default_str();
  classify_cmd->add_option("texts", classify.texts, "texts to classify (none: the lines of stdin)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*launch_cmd) {
      return dpcore::cli::launch(launch, argv[0], std::cerr);
    } else if (*vocab_cmd) {
      dpcore::cli::write_vocab(vocab, std::cout);
    } else if (*tokenize_cmd) {
      dpcore::cli::write_tokens(tokenize, std::cout);
    } else if (*classify_cmd) {
      if (classify.device == "auto") classify.device = dpcore::runtime::best_device().str();
      dpcore::cli::classify(classify, std::cin, std::cout);
    } else if (*train_cmd) {
      // DPCORE_INJECT adds to --inject: faults for a command line one cannot change (a
      // launcher's, a script's).
      if (const char* env = std::getenv("DPCORE_INJECT")) {
        std::vector<dpcore::train::Fault> faults = train.parallel.faults.faults();
        for (const auto& f : dpcore::train::parse_faults(env, "DPCORE_INJECT")) faults.push_back(f);
        train.parallel.faults = dpcore::train::FaultInjector(std::move(faults));
      }
      apply_recipe(*train_cmd, train);
      apply_optimizer_defaults(*train_cmd, train);
      check_pipeline_given(*train_cmd, train);
      train_backend.apply();
      dpcore::train::train(train, std::cout);
    } else if (*predict_cmd) {
      predict.model_given = predict_cmd->get_option("--model")->count() > 0;
      dpcore::train::predict(predict, std::cout);
    } else {
      eval_backend.apply();
      dpcore::train::evaluate(eval, std::cout);
    }
  } catch (const dpcore::Error& e) {
    // One rank of several under mpirun ends them all here (they would wait for it).
    dpcore::comm::abort_mpi_job_if_running(e.what());
    std::cerr << "dpcore: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
