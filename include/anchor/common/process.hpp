#pragma once
// Child processes: the pilot's workers and the e2e tests' binary runs.
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "anchor/common/unique_fd.hpp"

namespace anchor::proc {

// Absolute path of the running executable (/proc/self/exe).
std::string self_exe();

// This machine's host name (gethostname); "unknown" when it cannot be read.
std::string host_name();

// The absolute path of the executable `tool` in PATH's directories, then in
// `more_dirs` (colon-separated, e.g. "/usr/sbin:/sbin"); "" when none has it.
std::string find_on_path(const std::string& tool, const std::string& more_dirs = "");

// The same search in `dirs` (colon-separated, as a PATH value); relative
// entries are taken relative to `base` when it is given.
std::string find_in_dirs(const std::string& tool, const std::string& dirs, const std::string& base = "");

struct SpawnOptions {
  std::map<std::string, std::string> env;  // added to (or overriding) the inherited environment
  std::vector<std::string> unset;          // inherited variables the child does not get (env still adds)
  bool capture_stdout = false;             // pipe the child's stdout to Child::stdout_fd
  bool pipe_stdin = false;                 // the child's stdin a pipe whose write end is Child::stdin_fd
  bool merge_stderr = false;               // with capture_stdout: stderr into the same pipe
  bool new_process_group = false;
  bool die_with_parent = false;  // PR_SET_PDEATHSIG(SIGKILL): no orphaned workers
  std::string cwd;               // the child's working directory; "" -> this process's
};

// A started process and the parent's ends of its pipes, owned: closed when
// the Child goes (reset() closes one sooner: the child reads EOF on stdin).
struct Child {
  pid_t pid = -1;
  fs::UniqueFd stdout_fd;  // read end when capture_stdout, else none
  fs::UniqueFd stdin_fd;   // write end when pipe_stdin, else none
};

// fork + execv. Throws Error (kRuntime) when the process cannot be started.
Child spawn(const std::vector<std::string>& argv, const SpawnOptions& opts = {});

// Reads one line from fd (without the newline). nullopt at EOF.
std::optional<std::string> read_line(int fd);

// Waits for pid. Returns the exit status, or 128 + signal number when it was
// killed by a signal (the shell's convention). Retries EINTR.
int wait_exit(pid_t pid);
// The same without waiting: the status when pid has ended (and is now reaped),
// nullopt while it runs.
std::optional<int> try_wait(pid_t pid);
// A status as wait_exit returns it, in words: "exited with status 2",
// "exited with status 137 (killed by SIGKILL)".
std::string describe_exit(int status);

// This process becomes a subreaper (PR_SET_CHILD_SUBREAPER): a process its
// children leave behind (a double fork, a setsid'd daemon) is reparented to
// it instead of to init, so that reap_orphans can end it.
void become_subreaper();
// SIGKILLs and reaps every child of this process, again as their own
// children are reparented here, until none is left or `budget_s` has passed.
// For a subreaper, once every process it started has ended: nothing they
// started outlives them. Returns how many were still running outside
// `groups_ended` (process groups the caller has SIGKILLed already).
int reap_orphans(const std::vector<pid_t>& groups_ended = {}, double budget_s = 2.0);

// Runs argv to completion, returning (status, stdout).
struct RunResult {
  int status = -1;
  std::string out;
};
RunResult run_capture(const std::vector<std::string>& argv, const SpawnOptions& opts = {});

}  // namespace anchor::proc
