#include "anchor/common/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "anchor/common/sentinel.hpp"
#include "anchor/error.hpp"

extern char** environ;

namespace anchor::proc {

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) throw io_error("readlink", "/proc/self/exe", errno);
  return std::string(buf, static_cast<size_t>(n));
}

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : "unknown";
}

namespace {

// In the child, before exec: `from` becomes `to`. dup2 onto itself changes
// nothing, so a pipe end that already is `to` (the parent had that
// descriptor closed) keeps its close-on-exec flag: cleared here instead.
// Async-signal-safe.
void move_onto(int from, int to) {
  if (from == to)
    ::fcntl(to, F_SETFD, 0);
  else
    ::dup2(from, to);
}

// In the child, before any move_onto: a source end that sits on another
// standard descriptor than its target (the parent had 0-2 closed, so the pipes
// took them) is copied above 2 first, or an earlier move would overwrite it.
// Async-signal-safe.
int lift(int fd, int target) { return fd <= STDERR_FILENO && fd != target ? ::fcntl(fd, F_DUPFD, 3) : fd; }

// In the child, before exec: only stdin, stdout and stderr cross into the new
// program, as with Python's subprocess (close_fds): a descriptor the parent
// holds without close-on-exec (events.jsonl's stream, a library's socket, one
// this process inherited) does not leak into a worker or a user's program.
// close_range where the kernel has it (5.9), else each below `max_fd`.
// Async-signal-safe.
void close_inherited(int max_fd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd) ::close(fd);
}

// The descriptor limit for close_inherited's fallback, read before fork.
int descriptor_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 65536;
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1U << 20));
}

}  // namespace

namespace {

// In the child after a failed execve: says which program and why, with what to do, using only
// async-signal-safe calls (write, _exit), and exits 127 as a shell does.
[[noreturn]] void exec_failed(const char* path, int err) {
  const char* why = err == E2BIG     ? ": its arguments and environment are too large (E2BIG: over the kernel's "
                                       "limit; pass large values in a file, not on the command line)\n"
                    : err == ENOENT  ? ": no such file (ENOENT; or its interpreter is missing)\n"
                    : err == EACCES  ? ": permission denied (EACCES: not executable, or on a noexec mount)\n"
                    : err == ENOEXEC ? ": not an executable format (ENOEXEC: a script without its #! line?)\n"
                                     : ": the kernel refused it\n";
  const char head[] = "anchor: error: exec of ";
  (void)!::write(STDERR_FILENO, head, sizeof head - 1);
  (void)!::write(STDERR_FILENO, path, std::strlen(path));
  (void)!::write(STDERR_FILENO, why, std::strlen(why));
  ::_exit(127);
}

}  // namespace

Child spawn(const std::vector<std::string>& argv, const SpawnOptions& opts) {
  if (argv.empty()) throw Error(ErrorKind::kRuntime, "spawn: empty command");
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos && opts.env.count(kv.substr(0, eq))) continue;
    if (eq != std::string::npos &&
        std::find(opts.unset.begin(), opts.unset.end(), kv.substr(0, eq)) != opts.unset.end())
      continue;
    env_strings.push_back(std::move(kv));
  }
  for (const auto& [k, v] : opts.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  // The parent's ends and the child's, owned until the child has its own.
  fs::UniqueFd out_read, out_write, in_read, in_write;
  auto make_pipe = [](fs::UniqueFd& read_end, fs::UniqueFd& write_end) {
    int p[2] = {-1, -1};
    if (::pipe2(p, O_CLOEXEC) != 0) throw Error(ErrorKind::kRuntime, std::string("pipe: ") + std::strerror(errno));
    read_end.reset(p[0]);
    write_end.reset(p[1]);
  };
  if (opts.capture_stdout) make_pipe(out_read, out_write);
  if (opts.pipe_stdin) make_pipe(in_read, in_write);

  const pid_t parent = ::getpid();
  const int max_fd = descriptor_limit();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorKind::kRuntime, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (opts.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    }
    if (opts.new_process_group) ::setpgid(0, 0);
    // Workers must not inherit the supervisor's signal dispositions or mask.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    // The child never returns from here (exec or _exit): no destructor closes these.
    const int out = opts.capture_stdout ? lift(out_write.get(), STDOUT_FILENO) : -1;
    const int in = opts.pipe_stdin ? lift(in_read.get(), STDIN_FILENO) : -1;
    if (opts.capture_stdout) move_onto(out, STDOUT_FILENO);
    if (opts.capture_stdout && opts.merge_stderr) move_onto(out, STDERR_FILENO);
    if (opts.pipe_stdin) move_onto(in, STDIN_FILENO);
    close_inherited(max_fd);
    if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) {
      const char msg[] = "anchor: error: cannot change into the working directory of the command\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::execve(args[0], args.data(), envp.data());
    exec_failed(args[0], errno);
  }
  // The child's process group exists before spawn returns (its own setpgid may not have run yet),
  // so a kill(-pid) right away reaches it; EACCES after its exec is harmless.
  if (opts.new_process_group) ::setpgid(pid, pid);
  Child c;
  c.pid = pid;
  out_write.reset();  // the child's ends: only the child holds them now
  in_read.reset();
  c.stdout_fd = std::move(out_read);
  c.stdin_fd = std::move(in_write);
  return c;
}

std::optional<std::string> read_line(int fd) {
  std::string line;
  char ch;
  for (;;) {
    ssize_t n = ::read(fd, &ch, 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) return line.empty() ? std::nullopt : std::optional<std::string>(line);
    if (ch == '\n') return line;
    line.push_back(ch);
  }
}

namespace {
int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}
}  // namespace

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return decode(status);
}

std::optional<int> try_wait(pid_t pid) {
  int status = 0;
  pid_t got;
  while ((got = ::waitpid(pid, &status, WNOHANG)) < 0) {
    if (errno != EINTR) return -1;
  }
  if (got == 0) return std::nullopt;
  return decode(status);
}

std::string describe_exit(int status) {
  std::string code = "exited with status " + std::to_string(status);
  if (status <= 128 || status >= 128 + 65) return code;
  switch (status - 128) {
    case SIGKILL: return code + " (killed by SIGKILL)";
    case SIGTERM: return code + " (killed by SIGTERM)";
    case SIGINT: return code + " (killed by SIGINT)";
    case SIGSEGV: return code + " (killed by SIGSEGV: a crash)";
    case SIGABRT: return code + " (killed by SIGABRT: an abort)";
    case SIGBUS:
      return code + " (killed by SIGBUS: a memory-mapped file, a data shard perhaps, cut short while in use)";
    case SIGPIPE: return code + " (killed by SIGPIPE)";
    case SIGHUP: return code + " (killed by SIGHUP)";
    default: return code + " (killed by signal " + std::to_string(status - 128) + ")";
  }
}

RunResult run_capture(const std::vector<std::string>& argv, const SpawnOptions& opts) {
  SpawnOptions o = opts;
  o.capture_stdout = true;
  Child c = spawn(argv, o);
  RunResult r;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(c.stdout_fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.out.append(buf, static_cast<size_t>(n));
  }
  c.stdout_fd.reset();
  r.status = wait_exit(c.pid);
  return r;
}

std::string find_in_dirs(const std::string& tool, const std::string& dirs, const std::string& base) {
  std::stringstream ss(dirs);
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (dir.empty()) continue;
    if (dir[0] != '/' && !base.empty()) dir = base + "/" + dir;
    std::string candidate = dir + "/" + tool;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string find_on_path(const std::string& tool, const std::string& more_dirs) {
  const char* path = std::getenv("PATH");
  return find_in_dirs(tool, std::string(path ? path : "") + ":" + more_dirs);
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

namespace {

// The children of this process: /proc/self/task/<tid>/children of every thread.
std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    for (long pid = 0; in >> pid;)
      if (static_cast<pid_t>(pid) != sentinel_pid()) out.push_back(static_cast<pid_t>(pid));  // it must outlive us
  }
  return out;
}

// From /proc/<pid>/stat: whether `pid` has ended and waits to be reaped (state Z), and its process group.
std::pair<bool, pid_t> state_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return {true, 0};
  std::istringstream rest(line.substr(paren + 1));
  char state = 0;
  long ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp;
  return {state == 'Z', static_cast<pid_t>(pgrp)};
}

}  // namespace

int reap_orphans(const std::vector<pid_t>& groups_ended, double budget_s) {
  std::vector<pid_t> found;  // running outside groups_ended when first seen: ended here, each counted once
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
  for (;;) {
    bool any = false;
    for (const pid_t pid : own_children()) {
      any = true;
      const auto [zombie, group] = state_of(pid);
      const bool ours = std::find(groups_ended.begin(), groups_ended.end(), group) != groups_ended.end();
      if (!zombie && !ours && std::find(found.begin(), found.end(), pid) == found.end()) found.push_back(pid);
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, WNOHANG);
    }
    if (!any || std::chrono::steady_clock::now() > deadline) return static_cast<int>(found.size());
    ::usleep(2000);
  }
}

}  // namespace anchor::proc
