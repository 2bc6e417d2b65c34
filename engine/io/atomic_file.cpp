#include "engine/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kernels/error.h"

namespace dpcore::io {

static std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A temporary file's name: the target's, then kTempMark, then the six characters mkstemp
// puts in place of kRandomPart.
static const std::string kTempMark = ".tmp-";
static const std::string kRandomPart = "XXXXXX";

AtomicFileWriter::AtomicFileWriter(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  const std::string pattern = path_ + kTempMark + kRandomPart;
  std::vector<char> templ(pattern.c_str(), pattern.c_str() + pattern.size() + 1);  // with the terminating NUL
  fd_ = mkstemp(templ.data());
  if (fd_ < 0) fail(what_, ": cannot create a temporary file next to '", path_, "': ", std::strerror(errno));
  temp_path_ = templ.data();
  // mkstemp creates the file 0600; a saved file should get the usual 0644 that open() with
  // the common umask 022 would give, so other users and tools can read it.
  if (fchmod(fd_, 0644) != 0) {
    int err = errno;  // the destructor does not run when a constructor throws: clean up here
    close(fd_);
    unlink(temp_path_.c_str());
    errno = err;
    fail_errno("set permissions on");
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temp_path_.empty()) unlink(temp_path_.c_str());
}

void AtomicFileWriter::fail_errno(const char* action) {
  fail(what_, ": cannot ", action, " '", temp_path_, "' (writing '", path_, "'): ", std::strerror(errno));
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno("write");
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (fsync(fd_) != 0) fail_errno("flush");
  int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) fail_errno("close");
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) fail_errno("rename");
  committed_ = true;
  // The new name survives a power loss only once the directory is synced.
  const std::string dir = parent_dir(path_);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  const bool synced = dir_fd >= 0 && fsync(dir_fd) == 0;
  const int err = errno;
  if (dir_fd >= 0) close(dir_fd);
  // EINVAL: a filesystem that does not sync directories at all (some network and FUSE
  // ones); the rename's durability is then the filesystem's own, as for every program.
  if (!synced && !(dir_fd >= 0 && err == EINVAL)) {
    fail(what_, ": cannot sync the directory '", dir, "' after renaming '", temp_path_, "' to '", path_,
         "' (the rename may not survive a power loss): ", std::strerror(err));
  }
}

std::string temp_target(const std::string& file) {
  const size_t tail = kTempMark.size() + kRandomPart.size();
  if (file.size() <= tail || file.compare(file.size() - tail, kTempMark.size(), kTempMark) != 0) return "";
  return file.substr(0, file.size() - tail);
}

size_t remove_stale_temps(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string dir = parent_dir(path);
  size_t removed = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;  // nothing to clean where nothing can be listed
  while (const dirent* entry = readdir(d)) {
    const std::string file = entry->d_name;
    if (temp_target(file) == name && unlink((dir + "/" + file).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace dpcore::io
