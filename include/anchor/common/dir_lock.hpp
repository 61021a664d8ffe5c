#pragma once
// An advisory lock on a directory, so that two pilots never write into one
// run directory or one checkpoint.dir at once (docs/pilot.md, "One pilot per
// directory").
//
// flock(2) on <dir>/.anchor.lock, taken without waiting and held while the
// DirLock lives. The kernel releases it when the holding process dies, however
// it dies, so a lock left by a killed pilot never blocks the next one: the
// file stays, the lock does not. The file says who holds the lock (pid, host,
// run id, since when), so a refusal can name the other pilot.
//
// Advisory: it binds processes that take it (every anchor pilot does), not
// others. On a network file system flock is only as good as the server's
// lock support (NFSv4 has it; some FUSE file systems lock per host only).
#include <string>

#include "anchor/common/unique_fd.hpp"

namespace anchor::fs {

class DirLock {
 public:
  static constexpr const char* kFile = ".anchor.lock";

  // Takes the lock of `dir` (which must exist) for run `run_id`. `what` names
  // the directory in errors ("checkpoint.dir /data/ckpt"). Throws Error
  // (kUsage, exit 2) when another process holds it, naming that process's pid,
  // host and run and what to do; Error (kIo) when the lock file cannot be
  // created or locked for another reason.
  static DirLock acquire(const std::string& dir, const std::string& what, const std::string& run_id);

  // Move-only (the descriptor's): closing the last descriptor of the lock
  // file releases the flock.
  bool held() const { return static_cast<bool>(fd_); }

 private:
  UniqueFd fd_;
};

}  // namespace anchor::fs
