// The checkpoint files of a run on disk (train/checkpoints/checkpoint_files.h): the kept copy where the
// filesystem has no hard links, what writes killed midway leave, and a directory that
// cannot be synced.
//
// This program stands in for two system calls, for itself only: link(2), which
// std::filesystem::create_hard_link calls, fails with EPERM while `no_hard_links` is set (as
// on a filesystem without hard links); fsync(2) records the file each call synced (device
// and inode) and, while `fail_directory_fsync` is set, fails on a directory with
// `directory_fsync_errno` (EIO unless a test says otherwise); both otherwise make the real
// system call.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "engine/sgd.h"
#include "support/error_of.h"
#include "train/checkpoints/checkpoint.h"
#include "train/checkpoints/checkpoint_files.h"
#include "train/tiny_job.h"

namespace {

bool no_hard_links = false;
bool fail_directory_fsync = false;
int directory_fsync_errno = EIO;
std::set<std::pair<dev_t, ino_t>> synced_files;

}  // namespace

extern "C" int link(const char* from, const char* to) {
  if (no_hard_links) {
    errno = EPERM;
    return -1;
  }
  return int(syscall(SYS_link, from, to));
}

extern "C" int fsync(int fd) {
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    if (fail_directory_fsync && S_ISDIR(st.st_mode)) {
      errno = directory_fsync_errno;
      return -1;
    }
    synced_files.insert({st.st_dev, st.st_ino});
  }
  return int(syscall(SYS_fsync, fd));
}

namespace dpcore::train {
namespace {

namespace fs = std::filesystem;

// Sets one of the switches above for one test.
class Switch {
 public:
  explicit Switch(bool& flag) : flag_(flag) { flag_ = true; }
  ~Switch() { flag_ = false; }

 private:
  bool& flag_;
};

// A whole checkpoint of the tiny model, at `step`, written by `save_keeping` keeping `keep`.
void save(const std::string& dir, int64_t step, int keep) {
  auto model = tiny_job::tiny_model();
  Sgd sgd(model->parameters(), tiny_job::kSgd);
  TrainProgress progress;
  progress.step = step;
  save_keeping(dir, step, keep, [&](const std::string& path) { write_checkpoint(path, *model, sgd, progress, {}); });
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool synced(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && synced_files.count({st.st_dev, st.st_ino}) > 0;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Without hard links the newest is kept as a copy: the same bytes, read back whole by
// --resume, and synced (under the name it ends with, or before the rename that gave it it),
// so that a power loss after the save cannot leave a kept file the rename made but whose
// bytes never reached the disk.
TEST(CheckpointFiles, TheKeptCopyWithoutHardLinksIsWholeAndSynced) {
  testing::TempDir dir;
  save(dir.path(), 3, 2);
  const std::string step3 = bytes_of(checkpoint_path(dir.path()));
  {
    Switch off(no_hard_links);
    synced_files.clear();
    save(dir.path(), 4, 2);
  }
  const std::string kept = kept_checkpoint_path(dir.path(), 3);
  ASSERT_TRUE(fs::exists(kept));
  EXPECT_NE(fs::status(kept).type(), fs::file_type::symlink);
  EXPECT_EQ(fs::hard_link_count(kept), 1u) << "a copy, not a link";
  EXPECT_EQ(bytes_of(kept), step3);
  EXPECT_EQ(checkpoint_progress(read_checkpoint(kept)).step, 3);
  EXPECT_TRUE(synced(kept)) << "the kept copy was never synced";
  EXPECT_TRUE(synced(dir.path())) << "nor its directory";
  EXPECT_EQ(names_in(dir.path()),
            (std::vector<std::string>{"checkpoint-00000003.safetensors", "checkpoint.safetensors"}));
}

// A write killed midway leaves its temporary file ("<target>.tmp-" and six characters, the
// atomic writer's names): the next save removes those of the newest and of the kept files,
// and nothing else, not even a user's file that looks close.
TEST(CheckpointFiles, ASaveRemovesTheTemporaryFilesOfKilledWritesAndNothingElse) {
  testing::TempDir dir;
  save(dir.path(), 3, 2);
  const std::vector<std::string> leftovers = {"checkpoint.safetensors.tmp-a1B2c3",
                                              "checkpoint-00000002.safetensors.tmp-Zz9yX8"};
  const std::vector<std::string> users = {"checkpoint.safetensors.tmp-mine!!x", "checkpoint.safetensors.tmp-short",
                                          "checkpoint-best.safetensors.tmp-a1B2c3", "notes.txt.tmp-a1B2c3",
                                          "model.safetensors.tmp-a1B2c3"};
  for (const auto& name : leftovers) std::ofstream(dir.file(name)) << "half a checkpoint";
  for (const auto& name : users) std::ofstream(dir.file(name)) << "the user's";
  save(dir.path(), 4, 2);
  std::vector<std::string> expected = users;
  expected.push_back("checkpoint-00000003.safetensors");
  expected.push_back("checkpoint.safetensors");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names_in(dir.path()), expected);
}

// The rename that puts a checkpoint in place lasts through a power loss only once its
// directory is synced: a directory that cannot be is an error that names it.
TEST(CheckpointFiles, ADirectoryThatCannotBeSyncedIsAnErrorNamingIt) {
  testing::TempDir dir;
  Switch fail(fail_directory_fsync);
  const std::string error = testing::error_of([&] { save(dir.path(), 1, 1); });
  EXPECT_NE(error.find("cannot sync the directory '" + dir.path() + "'"), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(EIO)), std::string::npos) << error;
}

// A filesystem that does not sync directories at all answers EINVAL (fsync(2)): the save
// goes on, as every program's does there.
TEST(CheckpointFiles, AFilesystemThatDoesNotSyncDirectoriesIsNoError) {
  testing::TempDir dir;
  Switch fail(fail_directory_fsync);
  directory_fsync_errno = EINVAL;
  EXPECT_NO_THROW(save(dir.path(), 1, 1));
  directory_fsync_errno = EIO;
  EXPECT_TRUE(fs::exists(checkpoint_path(dir.path())));
}

}  // namespace
}  // namespace dpcore::train
