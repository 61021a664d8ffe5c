#include "anchor/error.hpp"

#include <cerrno>
#include <cstring>

#include "anchor/common/utf8.hpp"

namespace anchor {

std::string errno_name(int err) {
  switch (err) {
#define ANCHOR_ERRNO(e) \
  case e: return #e;
    ANCHOR_ERRNO(ENOSPC)
    ANCHOR_ERRNO(EIO)
    ANCHOR_ERRNO(ENOENT)
    ANCHOR_ERRNO(EACCES)
    ANCHOR_ERRNO(EPERM)
    ANCHOR_ERRNO(EEXIST)
    ANCHOR_ERRNO(EISDIR)
    ANCHOR_ERRNO(ENOTDIR)
    ANCHOR_ERRNO(ELOOP)
    ANCHOR_ERRNO(EFBIG)
    ANCHOR_ERRNO(EDQUOT)
    ANCHOR_ERRNO(EROFS)
    ANCHOR_ERRNO(ENOTEMPTY)
    ANCHOR_ERRNO(EINVAL)
    ANCHOR_ERRNO(EMFILE)
    ANCHOR_ERRNO(ENAMETOOLONG)
    ANCHOR_ERRNO(ENXIO)
    ANCHOR_ERRNO(EAGAIN)
#undef ANCHOR_ERRNO
    default: return "errno " + std::to_string(err);
  }
}

Error io_error(const std::string& op, const std::string& path, int err, std::string hint) {
  // The path may hold any byte; the message may end up in JSON (a skip
  // reason, a verification problem): keep it valid UTF-8.
  std::string msg = printable(op + " " + path) + ": " + std::strerror(err) + " (" + errno_name(err) + ")";
  if (hint.empty()) {
    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
      hint = "free space on that file system or point the output elsewhere; nothing committed was touched";
    else if (err == EACCES || err == EPERM)
      hint = "check the permissions of the path and its parent directories";
    else if (err == ENOENT)
      hint = "check that the path exists and is spelled as intended";
  }
  return Error(ErrorKind::kIo, msg, std::move(hint));
}

ExitCode exit_code_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kRuntime:
    case ErrorKind::kIo: return ExitCode::kRuntime;
    case ErrorKind::kUsage:
    case ErrorKind::kConfig: return ExitCode::kUsage;
    case ErrorKind::kVerification: return ExitCode::kVerification;
    case ErrorKind::kInterrupted: return ExitCode::kInterrupted;
    case ErrorKind::kTerminated: return ExitCode::kTerminated;
  }
  return ExitCode::kRuntime;
}

ExitCode exit_code_from(int code) noexcept {
  for (ExitCode c : {ExitCode::kOk, ExitCode::kRuntime, ExitCode::kUsage, ExitCode::kVerification,
                     ExitCode::kInterrupted, ExitCode::kTerminated})
    if (static_cast<int>(c) == code) return c;
  return ExitCode::kRuntime;
}

}  // namespace anchor
