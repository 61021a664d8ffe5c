#pragma once
// Opening files to read without ever blocking on what is not a file.
//
// open(2) of a FIFO with O_RDONLY blocks until a writer appears (forever, in
// a checkpoint directory), and a character device such as /dev/zero never
// ends. Every file anchor reads is opened through open_regular(): O_NONBLOCK
// so the open itself cannot block, fstat of that same descriptor (no race
// with a rename between a stat and the open), refuse anything that is not a
// regular file, then clear O_NONBLOCK. The descriptor is owned by a UniqueFd
// that closes it on scope exit.
#include <sys/stat.h>

#include <string>

#include "anchor/error.hpp"

namespace anchor::fs {

// An owned file descriptor: closed by the destructor. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Gives up ownership: the caller closes the descriptor.
  int release() noexcept;
  // Closes the descriptor now (errors ignored: the file was only read, or an
  // error is already on its way), and owns `fd` instead.
  void reset(int fd = -1) noexcept;
  // Closes the descriptor now and returns 0, or the errno close(2) gave (a
  // written file: FileSystem::close says it). Owns nothing afterwards.
  int close() noexcept;

 private:
  int fd_ = -1;
};

// How open_regular names the file and classifies a file that is not regular.
struct OpenRegular {
  std::string what;                 // "private key", "data shard": named in messages; empty: none
  ErrorKind kind = ErrorKind::kIo;  // kind of the "not a regular file" error
  std::string hint;                 // replaces the default hint of that error
};

// Opens `path` read-only (O_CLOEXEC) without blocking and returns the
// descriptor in blocking mode, after checking on that descriptor that it is a
// regular file; `st` (optional) receives its fstat. Throws:
//  - io_error "open [what ]<path>: <strerror> (<ERRNO>)" when open fails;
//  - Error(how.kind) "<what or read> <path>: is a directory, not a file" or
//    "...: is a FIFO (named pipe), not a regular file" (socket, character
//    device, block device likewise), with a hint, for anything else.
UniqueFd open_regular(const std::string& path, struct stat* st = nullptr, const OpenRegular& how = {});

// Reads `fd` to end of file (retrying EINTR). Throws io_error("read", path).
std::string read_all(int fd, const std::string& path);

}  // namespace anchor::fs
