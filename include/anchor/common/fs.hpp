#pragma once
// File-system operations behind a seam.
//
// Everything that must survive a crash (checkpoints, manifests, reports) goes
// through FileSystem, so tests can make the N-th write, fsync, rename or
// directory fsync fail with a chosen errno (FaultInjectingFs). Every method
// checks its return value and throws anchor::Error (kIo) naming the operation,
// the path and the errno.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "anchor/common/unique_fd.hpp"

namespace anchor::fs {

enum class Op { kCreate, kWrite, kFsync, kRename, kFsyncDir, kMkdir, kRemove };
const char* op_name(Op op);

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // open(O_CREAT|O_EXCL|O_WRONLY|O_CLOEXEC): never reuses an existing file.
  // The descriptor is owned: an error path that leaves it closes it.
  virtual UniqueFd create_excl(const std::string& path, mode_t mode = 0644);
  // Writes all of data (retrying short writes and EINTR).
  virtual void write_all(int fd, const void* data, std::size_t len, const std::string& path);
  virtual void fsync(int fd, const std::string& path);
  // Closes a file that was written, and says so when close(2) fails.
  virtual void close(UniqueFd fd, const std::string& path);
  virtual void rename(const std::string& from, const std::string& to);
  // Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE).
  virtual void exchange(const std::string& a, const std::string& b);
  virtual void fsync_dir(const std::string& dir);
  virtual void mkdir(const std::string& dir, mode_t mode = 0755);
  virtual void remove_all(const std::string& path);
};

// The process-wide real implementation.
FileSystem& real_fs();

// Fails the N-th call (1-based, counted per operation kind) of an operation
// with a chosen errno; all other calls go to the real file system. For tests.
class FaultInjectingFs : public FileSystem {
 public:
  void fail_on(Op op, int nth, int err);
  int calls(Op op) const;

  UniqueFd create_excl(const std::string& path, mode_t mode) override;
  void write_all(int fd, const void* data, std::size_t len, const std::string& path) override;
  void fsync(int fd, const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void exchange(const std::string& a, const std::string& b) override;
  void fsync_dir(const std::string& dir) override;
  void mkdir(const std::string& dir, mode_t mode) override;
  void remove_all(const std::string& path) override;

 private:
  void tick(Op op, const std::string& path);
  std::map<Op, int> count_;
  std::map<Op, std::pair<int, int>> fail_;  // op -> (nth, errno)
};

// Writes `content` to `path` atomically: a sibling temp file created with
// O_EXCL, written, fsynced, renamed over `path`, then the directory fsynced.
// On any failure the temp file is removed and `path` is left as it was.
void atomic_write_file(const std::string& path, const std::string& content, FileSystem& fs = real_fs(),
                       mode_t mode = 0644);

// Reads a whole regular file (opened through open_regular, common/unique_fd.hpp:
// a FIFO, socket, device or directory is refused at once instead of blocking
// or reading forever). Throws Error (kIo) naming the path.
std::string read_file(const std::string& path);

// Expands a glob pattern (sorted). Throws Error (kConfig) when it matches nothing.
std::vector<std::string> expand_glob(const std::string& pattern);

// A short random suffix for temp names ("tmp-3f9a1c2b").
std::string random_suffix();

}  // namespace anchor::fs
