#include "anchor/common/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "anchor/common/utf8.hpp"

namespace anchor::fs {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int UniqueFd::release() noexcept {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::close() noexcept {
  if (fd_ < 0) return 0;
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc == 0 ? 0 : errno;
}

namespace {

const char* file_type(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "of an unknown type";
}

}  // namespace

UniqueFd open_regular(const std::string& path, struct stat* st_out, const OpenRegular& how) {
  const std::string named = how.what.empty() ? std::string() : " " + how.what;
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of
  // waiting for one. O_NOCTTY: a terminal device never becomes ours.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) {
    const int err = errno;  // before anything else can change it
    throw io_error("open" + named, path, err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    throw io_error("stat" + named, path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    const std::string who = (how.what.empty() ? std::string("read") : how.what) + " " + printable(path) + ": ";
    if (S_ISDIR(st.st_mode))
      throw Error(how.kind, who + "is a directory, not a file",
                  how.hint.empty() ? "name a file, not a directory" : how.hint);
    throw Error(how.kind, who + "is " + file_type(st.st_mode) + ", not a regular file",
                how.hint.empty() ? "anchor reads only regular files (a FIFO, socket or device could block or "
                                   "never end): put the real file at that path"
                                 : how.hint);
  }
  // Reads of a regular file never block anyway; clear the flag so the
  // descriptor behaves like any other (and mmap/read see no surprise). Of the
  // flags F_SETFL sets, O_NONBLOCK is the only one open() set: 0 clears it
  // without an F_GETFL first (one system call per file a pin opens).
  if (::fcntl(fd.get(), F_SETFL, 0) != 0) {
    const int err = errno;
    throw io_error("fcntl" + named, path, err);
  }
  if (st_out) *st_out = st;
  return fd;
}

std::string read_all(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw io_error("read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace anchor::fs
