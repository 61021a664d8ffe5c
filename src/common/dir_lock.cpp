#include "anchor/common/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <nlohmann/json.hpp>

#include "anchor/common/process.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::fs {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Who holds the lock, from the lock file's content (written by the holder
// right after it took the lock). Tolerates anything: the file may be empty
// (the holder has not written it yet) or not ours.
std::string describe_holder(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  off_t at = 0;
  while (text.size() < std::size_t{64} * 1024 && (n = ::pread(fd, buf, sizeof buf, at)) > 0) {
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  const auto j = json_depth(text, kMaxJsonDepth) > kMaxJsonDepth
                     ? nlohmann::json()
                     : nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "another process (its lock file does not say which)";
  auto field = [&](const char* k) {
    const auto it = j.find(k);
    if (it == j.end()) return std::string("?");
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  return "pilot run " + field("run_id") + " (pid " + field("pid") + " on host " + field("host") + ", since " +
         field("since") + ")";
}

}  // namespace

DirLock DirLock::acquire(const std::string& dir, const std::string& what, const std::string& run_id) {
  const std::string path = dir + "/" + kFile;
  // O_NOFOLLOW: a symlink planted at the lock's name is refused, not followed.
  DirLock lock;
  lock.fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!lock.fd_) throw io_error("open the lock file", path, errno);
  const int fd = lock.fd_.get();
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK)
      throw Error(ErrorKind::kUsage, what + " is in use by " + describe_holder(fd),
                  "two pilots must not write into one directory: wait for that pilot to end, or give this one "
                  "another directory (its lock is " +
                      path + "; the kernel frees it when that process ends)");
    throw io_error("lock", path, e);
  }
  const std::string who =
      nlohmann::json{
          {"pid", static_cast<long>(::getpid())}, {"host", proc::host_name()}, {"run_id", run_id}, {"since", utc_now()}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  // Best effort: the lock holds whether or not the note about its holder is written.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, who.data(), who.size(), 0);
  return lock;
}

}  // namespace anchor::fs
