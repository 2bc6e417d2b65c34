// The checkpoint files of one run in --checkpoint DIR, and which of them are kept.
//
//   DIR/checkpoint.safetensors            the newest, always (what a single file was before)
//   DIR/checkpoint-STEP.safetensors       with --keep-checkpoints K > 1, the K-1 before it,
//                                         STEP zero-padded to 8 digits so that `ls` sorts them
//
// Saving a checkpoint at step S never leaves a moment without a whole newest checkpoint:
// the current newest, if it reads back whole, first gets its STEP name as a hard link (the
// same bytes under a second name; where the filesystem has none, a copy written like a
// checkpoint), the new file is then written to a temporary name, synced and renamed over
// DIR/checkpoint.safetensors (the directory synced after each rename), and only then are
// the kept files beyond K-1 removed. Each save first removes the temporary files that saves
// killed midway left (the atomic writer's names for these files, nothing else). --resume
// takes the newest file that reads back whole, falling back to the older ones in step
// order when one is damaged (train/checkpoints/resume.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace dpcore::train {

std::string checkpoint_path(const std::string& dir);                      // the newest
std::string kept_checkpoint_path(const std::string& dir, int64_t step);   // an older one

// Saves the checkpoint of step `step` through `write` (which writes a whole file at the path
// it is given), keeping the `keep` newest checkpoints of this run: the new one and the
// keep-1 before it. Older kept files, and kept files from steps at or after `step` (left
// by a run that this one resumed before it), are removed once the new one is in place; the
// temporary files of killed saves before anything is written.
void save_keeping(const std::string& dir, int64_t step, int keep, const std::function<void(const std::string&)>& write);

// DIR's checkpoint files, newest first: checkpoint.safetensors, then the kept ones by
// falling step. Empty when there are none.
std::vector<std::string> checkpoint_files(const std::string& dir);

// The newest file of checkpoint_files() that read_checkpoint accepts. Each newer file that
// it refused is described in `skipped` ("FILE: why"). Fails, listing every file and why,
// when none is usable, or when DIR holds no checkpoint.
io::SafetensorsFile newest_valid_checkpoint(const std::string& dir, std::vector<std::string>& skipped);

}  // namespace dpcore::train
