// Writes a file so that readers only ever see the old contents or the complete new ones:
// the bytes go to a temporary file next to the target, which is flushed to disk and then
// renamed over it. A crash or error half-way leaves the previous file untouched.
#pragma once

#include <cstddef>
#include <string>

namespace dpcore::io {

class AtomicFileWriter {
 public:
  // Creates "<path>.tmp-" plus six random characters in the target's directory (rename is
  // atomic only within one filesystem). `what` names the operation in error messages, e.g.
  // "save_safetensors".
  AtomicFileWriter(std::string path, std::string what);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename over the target, then fsync the directory so the rename persists
  // (failing, naming the directory, when it cannot be synced).
  void commit();

  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail_errno(const char* action);

  std::string path_, what_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Removes the temporary files that AtomicFileWriters for `path` left behind when their
// process was killed before commit ("<path>.tmp-" plus six random characters), for a path
// that one writer at a time uses (a run's --trace file), before it is written again.
// Returns how many it removed.
size_t remove_stale_temps(const std::string& path);

// The name of the file whose temporary file `file` (a name, no directory) would be, or ""
// when it is not named like one: "a.json" for "a.json.tmp-" plus six characters.
std::string temp_target(const std::string& file);

}  // namespace dpcore::io
