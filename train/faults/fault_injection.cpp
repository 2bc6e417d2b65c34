#include "train/faults/fault_injection.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/backend.h"
#include "engine/data/flag_text.h"
#include "engine/runtime.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "kernels/error.h"

namespace dpcore::train {

namespace {

const std::map<std::string, Fault::Kind>& kinds() {
  static const std::map<std::string, Fault::Kind> k = {
      {"throw", Fault::Kind::Throw},       {"throw-after-step", Fault::Kind::ThrowAfterStep},
      {"hang", Fault::Kind::Hang},         {"exit", Fault::Kind::Exit},
      {"nan", Fault::Kind::NanGradients}, {"bitflip", Fault::Kind::BitFlip}, {"slow", Fault::Kind::Slow}};
  return k;
}

std::string kind_name(Fault::Kind kind) {
  for (const auto& [name, k] : kinds()) {
    if (k == kind) return name;
  }
  return "?";
}

// The bit of a parameter's first element that bitflip flips: float32's highest mantissa
// bit (bit 22 of 0..31; for float64, bit 51). It changes the value by a quarter to a half
// of its magnitude: enough that the replica's parameters still differ after the step's
// update (a lowest bit could be rounded away by it), small enough to stay finite.
int flipped_bit(DType dtype) { return dtype == DType::Float64 ? 51 : 22; }

void sleep_seconds(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

std::optional<int64_t> whole(const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

Fault parse_one(const std::string& text, const std::string& source) {
  auto bad = [&](const auto&... why) -> Error {
    std::ostringstream os;
    os << source << " '" << text << "': ";
    (os << ... << why);
    os << " (expected KIND:replica=R,step=S[,factor=F], KIND one of throw, throw-after-step, hang, exit, nan, "
          "bitflip, slow; "
          "docs/fault-tolerance.md)";
    return Error(os.str());
  };
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  auto k = kinds().find(kind);
  if (k == kinds().end()) throw bad("unknown kind '", kind, "'");
  Fault f;
  f.kind = k->second;
  bool has_replica = false, has_step = false, has_factor = false;
  const std::string fields = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (!fields.empty()) {
    for (const std::string& field : data::split_commas(fields)) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) throw bad("'", field, "' is not KEY=VALUE");
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "replica") {
        if (has_replica) throw bad("replica= given twice");
        std::optional<int64_t> r = whole(value);
        if (!r || *r < 0 || *r > std::numeric_limits<int>::max()) {
          throw bad("replica=", value, ": must be a replica index, a whole number from 0");
        }
        f.replica = int(*r), has_replica = true;
      } else if (key == "step") {
        if (has_step) throw bad("step= given twice");
        std::optional<int64_t> s = data::positive_integer(value);
        if (!s) throw bad("step=", value, ": must be a step number, a whole number from 1");
        f.step = *s, has_step = true;
      } else if (key == "factor") {
        if (has_factor) throw bad("factor= given twice");
        if (f.kind != Fault::Kind::Slow) throw bad("factor= is for slow only");
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || v < 1) {
          throw bad("factor=", value, ": must be a finite number >= 1 (how many times as long compute takes)");
        }
        f.factor = v, has_factor = true;
      } else {
        throw bad("unknown key '", key, "' (keys: replica, step, factor)");
      }
    }
  }
  if (!has_replica) throw bad("replica=R is required");
  // A slow replica is slow from step S on, from the start unless told; the other faults
  // happen once, at a step that must be named.
  if (!has_step && f.kind != Fault::Kind::Slow) throw bad("step=S is required for ", kind);
  if (f.kind == Fault::Kind::Slow && !has_factor) throw bad("factor=F is required for slow");
  return f;
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& spec, const std::string& source) {
  std::vector<Fault> faults;
  std::string item;
  std::istringstream in(spec);
  while (std::getline(in, item, ';')) {
    if (item.empty()) continue;  // "a;b;" and an empty DPCORE_INJECT are fine
    faults.push_back(parse_one(item, source));
  }
  DPCORE_CHECK(!faults.empty() || source != "--inject", source, " '", spec, "': no fault given (expected ",
               "KIND:replica=R,step=S[,factor=F])");
  return faults;
}

std::string describe(const Fault& f) {
  std::ostringstream os;
  os << kind_name(f.kind) << ":replica=" << f.replica << ",step=" << f.step;
  if (f.kind == Fault::Kind::Slow) os << ",factor=" << f.factor;
  return os.str();
}

// What release_hangs() wakes: shared by every copy of one injector.
struct FaultInjector::HangState {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
};

FaultInjector::FaultInjector(std::vector<Fault> faults)
    : faults_(std::move(faults)), hangs_(std::make_shared<HangState>()) {}

void FaultInjector::run(int replica, int64_t step, layers::Model& model, const std::function<void()>& compute) const {
  before(replica, step);
  const auto t0 = std::chrono::steady_clock::now();
  compute();
  if (faults_.empty()) return;
  // The replica's device work must be done for its duration to mean anything (and before
  // its gradients or parameters are written from the host).
  runtime::synchronize(model.device());
  after(replica, step, model, seconds_since(t0));
}

// What an injected failure says: "replica 1: injected throw at step 3 (--inject ...)".
static std::string injected(const Fault& f, int replica, int64_t step) {
  return "replica " + std::to_string(replica) + ": injected " + kind_name(f.kind) + " at step " +
         std::to_string(step) + " (--inject " + describe(f) + ")";
}

void FaultInjector::before(int replica, int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.replica != replica || f.step != step) continue;
    const std::string what = injected(f, replica, step);
    switch (f.kind) {
      case Fault::Kind::Throw:
        throw Error(what);
      case Fault::Kind::Exit:
        // At once, as a process that crashes: no destructors, no flushing of other
        // streams, no checkpoint.
        std::fprintf(stderr, "dpcore: %s: the process exits with status %d\n", what.c_str(), kInjectedExitCode);
        std::fflush(stderr);
        _exit(kInjectedExitCode);
      case Fault::Kind::Hang: {
        std::unique_lock<std::mutex> lock(hangs_->mutex);
        hangs_->released_cv.wait(lock, [&] { return hangs_->released; });
        throw Error(what + ": the replica hung until the run gave up on it");
      }
      default:
        break;
    }
  }
}

void FaultInjector::after(int replica, int64_t step, layers::Model& model, double compute_seconds,
                          NanWriter nan) const {
  for (const Fault& f : faults_) {
    if (f.replica != replica) continue;
    if (f.kind == Fault::Kind::Slow && step >= f.step) {
      trace::Span span("injected", [&] { return trace::Label{"injected slowdown", {{"factor", f.factor}}}; });
      sleep_seconds((f.factor - 1) * compute_seconds);
    }
    if (f.step != step) continue;
    if (f.kind == Fault::Kind::NanGradients && nan == kNanWrittenHere) {
      model.parameters().grads().fill_(std::nan(""));
      runtime::synchronize(model.device());
    } else if (f.kind == Fault::Kind::BitFlip) {
      const FlatParameters& params = model.parameters();
      DPCORE_CHECK(!params.entries().empty(), "--inject ", describe(f), ": the model has no parameters to flip");
      // The first element of the first parameter, read, flipped and written back through
      // the host (the buffer may be on a GPU).
      Tensor first = params.values().narrow0(params.entries()[0].offset, params.entries()[0].offset + 1);
      Tensor host = first.to(Device::cpu()).clone();
      const int bit = flipped_bit(host.dtype());
      if (host.dtype() == DType::Float64) {
        uint64_t bits;
        std::memcpy(&bits, host.raw_data(), 8);
        bits ^= uint64_t(1) << bit;
        std::memcpy(host.raw_data(), &bits, 8);
      } else {
        uint32_t bits;
        std::memcpy(&bits, host.raw_data(), 4);
        bits ^= uint32_t(1) << bit;
        std::memcpy(host.raw_data(), &bits, 4);
      }
      first.copy_(host);
      runtime::synchronize(model.device());
    }
  }
}

void FaultInjector::after_step(int replica, int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.kind == Fault::Kind::ThrowAfterStep && f.replica == replica && f.step == step) {
      throw Error(injected(f, replica, step));
    }
  }
}

bool FaultInjector::writes_gradients(int replica, int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.kind == Fault::Kind::NanGradients && f.replica == replica && f.step == step) return true;
  }
  return false;
}

void FaultInjector::check(int replicas, const std::string& replicas_flag) const {
  for (const Fault& f : faults_) {
    DPCORE_CHECK(f.replica < replicas, "--inject ", describe(f), ": replica ", f.replica, " does not exist with ",
                 replicas_flag, " (replicas are 0 to ", replicas - 1, ")");
    if (f.kind != Fault::Kind::Hang) continue;
    // A hang is noticed by a peer whose collective times out (--replica-timeout): refused
    // where nothing would ever notice, rather than hanging the process for good.
    DPCORE_CHECK(replicas > 1, "--inject ", describe(f), ": with one replica nothing would notice the hang ",
                 "(the --replica-timeout is a peer's wait in a collective): use --replicas 2 or more");
  }
}

void FaultInjector::release_hangs() const {
  if (!hangs_) return;
  {
    std::lock_guard<std::mutex> lock(hangs_->mutex);
    hangs_->released = true;
  }
  hangs_->released_cv.notify_all();
}

void FaultInjector::rearm_hangs() const {
  if (!hangs_) return;
  std::lock_guard<std::mutex> lock(hangs_->mutex);
  hangs_->released = false;
}

}  // namespace dpcore::train
