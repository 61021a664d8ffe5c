#pragma once
// anchor::Error and the process exit codes: the one place both are defined.
//
// Library code throws Error; it never calls exit() or abort(), so a stage that
// fails can still save a checkpoint on the way out. Only main() catches,
// prints "anchor: error: <what>" and "hint: ...", and maps the kind to an exit
// code with exit_code_for().
#include <stdexcept>
#include <string>

namespace anchor {

// Exit codes, documented in README.md and docs/cli.md.
enum class ExitCode : int {
  kOk = 0,
  kRuntime = 1,        // a stage failed, I/O error, internal error
  kUsage = 2,          // bad command line or config
  kVerification = 3,   // drift, resume mismatch, bad signature, corrupt checkpoint
  kInterrupted = 130,  // SIGINT
  kTerminated = 143,   // SIGTERM
};

enum class ErrorKind {
  kRuntime,       // -> 1
  kIo,            // -> 1 (file system, carries errno)
  kUsage,         // -> 2
  kConfig,        // -> 2
  kVerification,  // -> 3
  kInterrupted,   // -> 130
  kTerminated,    // -> 143
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what, std::string hint = {})
      : std::runtime_error(what), kind_(kind), hint_(std::move(hint)) {}

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  ErrorKind kind_;
  std::string hint_;
};

// An I/O failure: names the operation, the path and the errno text.
// Example: io_error("write", "/ckpt/model.safetensors", ENOSPC)
//   -> "write /ckpt/model.safetensors: No space left on device (ENOSPC)"
Error io_error(const std::string& op, const std::string& path, int err, std::string hint = {});

// The symbolic name of an errno value ("ENOSPC"), or its number as text.
std::string errno_name(int err);

// The exit code an error of this kind ends the process with (main).
ExitCode exit_code_for(ErrorKind kind) noexcept;
// The ExitCode a number stands for, as another process reported it (a
// launched rank reads rank 0's through the store): a documented code as
// itself, any other number as kRuntime.
ExitCode exit_code_from(int code) noexcept;

}  // namespace anchor
