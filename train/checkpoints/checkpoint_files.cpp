#include "train/checkpoints/checkpoint_files.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>

#include "engine/io/atomic_file.h"
#include "train/checkpoints/checkpoint.h"

namespace dpcore::train {

namespace {

namespace fs = std::filesystem;

constexpr const char* kNewest = "checkpoint.safetensors";
constexpr const char* kKeptPrefix = "checkpoint-";
constexpr const char* kSuffix = ".safetensors";

// The step of a kept (older) checkpoint's file name, or -1 when `name` is not one (a user's
// "checkpoint-best.safetensors" is not).
int64_t kept_step(const std::string& name) {
  const size_t prefix = std::char_traits<char>::length(kKeptPrefix), suffix = std::char_traits<char>::length(kSuffix);
  if (name.size() <= prefix + suffix || name.compare(0, prefix, kKeptPrefix) != 0 ||
      name.compare(name.size() - suffix, suffix, kSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  const bool all_digits = std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
  if (digits.size() > 18 || !all_digits) return -1;
  return std::stoll(digits);
}

// The kept (older) checkpoints in `dir`, by falling step.
std::vector<std::pair<int64_t, std::string>> kept_files(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> kept;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = kept_step(it->path().filename().string());
    if (step >= 0) kept.emplace_back(step, it->path().string());
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return kept;
}

// Removes the temporary files that saves killed midway left in `dir`: the atomic writer's
// (engine/io/atomic_file.h) for the newest and for the kept files, nothing else. One run at
// a time saves into a checkpoint directory, so none of them is being written.
void remove_killed_writes(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string target = io::temp_target(it->path().filename().string());
    if (target == kNewest || kept_step(target) >= 0) leftovers.push_back(it->path());
  }
  for (const fs::path& path : leftovers) fs::remove(path, ec);  // (one that stays only costs disk space)
}

// The step of a whole, valid checkpoint, or -1 for a damaged one (a truncated file can
// keep its header): --resume would skip it, so keeping it would only take a place of the K.
// (Read whole once per save: the file was just written or resumed from, so it is usually
// still in the page cache.)
int64_t valid_step(const std::string& path) {
  try {
    return checkpoint_progress(read_checkpoint(path)).step;
  } catch (const Error&) {
    return -1;
  }
}

// Before the newest is replaced by step `step`'s: gives it its own name, so that it
// survives the rename. Not when it is from step `step` or later (the run that wrote it was
// resumed from an earlier checkpoint, so it is not this run's past), and never over an
// existing kept file (which may be the good copy of a step whose newest file is damaged).
void keep_current_newest(const std::string& dir, int64_t step) {
  const std::string newest = checkpoint_path(dir);
  std::error_code ec;
  if (!fs::exists(newest, ec)) return;
  const int64_t old_step = valid_step(newest);
  if (old_step < 0 || old_step >= step) return;
  const std::string kept = kept_checkpoint_path(dir, old_step);
  if (fs::exists(kept, ec)) return;
  fs::create_hard_link(newest, kept, ec);
  if (!ec) return;
  // A filesystem without hard links: a copy, written like a checkpoint (temporary name,
  // synced, renamed, directory synced), so that it is whole under its name after a crash.
  std::ifstream in(newest, std::ios::binary);
  DPCORE_CHECK(in.is_open(), "--keep-checkpoints: cannot open ", newest, " to keep it as ", kept);
  io::AtomicFileWriter copy(kept, "--keep-checkpoints");
  std::vector<char> chunk(size_t(1) << 20);
  while (in.read(chunk.data(), std::streamsize(chunk.size())) || in.gcount() > 0) {
    copy.write(chunk.data(), size_t(in.gcount()));
  }
  DPCORE_CHECK(!in.bad(), "--keep-checkpoints: cannot read ", newest, " to keep it as ", kept);
  copy.commit();
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/" + kNewest; }

std::string kept_checkpoint_path(const std::string& dir, int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%08lld", static_cast<long long>(step));
  return dir + "/" + kKeptPrefix + digits + kSuffix;
}

void save_keeping(const std::string& dir, int64_t step, int keep, const std::function<void(const std::string&)>& write) {
  DPCORE_CHECK(keep >= 1, "--keep-checkpoints ", keep, " must be at least 1");
  remove_killed_writes(dir);
  if (keep > 1) keep_current_newest(dir, step);
  write(checkpoint_path(dir));
  // Only now that the new checkpoint is whole on disk.
  int64_t kept = 0;
  for (const auto& [kept_step, path] : kept_files(dir)) {
    if (kept_step < step && kept < keep - 1) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove(path, ec);  // (a file that cannot be removed only costs disk space)
  }
}

std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::exists(checkpoint_path(dir), ec)) files.push_back(checkpoint_path(dir));
  for (const auto& [step, path] : kept_files(dir)) files.push_back(path);
  return files;
}

io::SafetensorsFile newest_valid_checkpoint(const std::string& dir, std::vector<std::string>& skipped) {
  const std::vector<std::string> files = checkpoint_files(dir);
  DPCORE_CHECK(!files.empty(), "--resume: no checkpoint in ", dir, " (no ", kNewest, " nor ", kKeptPrefix, "STEP",
               kSuffix, ")");
  for (const std::string& path : files) {
    try {
      return read_checkpoint(path);
    } catch (const Error& e) {
      skipped.push_back(e.what());  // (the message names the file)
    }
  }
  std::string why;
  for (const std::string& s : skipped) why += "\n  " + s;
  fail("--resume: no usable checkpoint in ", dir, ":", why);
}

}  // namespace dpcore::train
