#include "anchor/common/sentinel.hpp"

#include <openssl/rand.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace anchor::proc {

namespace {

pid_t g_sentinel = -1;

std::string new_token() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return std::to_string(::getpid()) + "-" + fs::random_suffix();
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

// Whether /proc/<pid>/environ holds `entry` ("NAME=value") as one whole NUL-separated entry. A zombie's
// environ reads empty; a process of another user's cannot be read: both are false.
bool environ_holds(const std::filesystem::path& proc_dir, const std::string& entry) {
  std::ifstream in(proc_dir / "environ", std::ios::binary);
  if (!in) return false;
  const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::size_t at = env.find(entry); at != std::string::npos; at = env.find(entry, at + 1)) {
    const std::size_t end = at + entry.size();
    if ((at == 0 || env[at - 1] == '\0') && (end == env.size() || env[end] == '\0')) return true;
  }
  return false;
}

}  // namespace

pid_t sentinel_pid() { return g_sentinel; }

int end_marked(const std::string& variable, const std::string& token, double budget_s) {
  const std::string entry = variable + "=" + token;
  const pid_t self = ::getpid();
  std::vector<pid_t> signalled;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
  for (;;) {
    bool any = false;  // a scan that finds none: every marked process has ended (a fork in flight is
                       // caught by the next scan, its parent having been found alive in this one)
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
      if (pid == self || !environ_holds(e.path(), entry)) continue;
      any = true;
      if (::kill(pid, SIGKILL) == 0 && std::find(signalled.begin(), signalled.end(), pid) == signalled.end())
        signalled.push_back(pid);
    }
    if (!any || std::chrono::steady_clock::now() > deadline) return static_cast<int>(signalled.size());
    ::usleep(5000);
  }
}

std::string sentinel_binary(const std::string& worker_binary) {
  const std::string self = self_exe();
  // `anchor` beside this binary or beside the workers' (anchor-torch): it starts without LibTorch.
  for (const std::string& beside : {self, worker_binary}) {
    if (beside.empty()) continue;
    const auto frontend = std::filesystem::path(beside).parent_path() / "anchor";
    if (::access(frontend.c_str(), X_OK) == 0) return frontend.string();
  }
  // Else this binary, but only when it is anchor's: any other (a test binary that runs a pilot in its
  // own process) would not know __sentinel, and might start pilots of its own.
  const std::string name = std::filesystem::path(self).filename().string();
  return name == "anchor" || name == "anchor-torch" ? self : "";
}

void start_sentinel(const std::string& worker_binary) {
  if (g_sentinel > 0) return;
  const std::string exe = sentinel_binary(worker_binary);
  if (exe.empty()) {
    ANCHOR_LOG_DEBUG("pilot", "no sentinel: no anchor binary beside {} to run it", self_exe());
    return;
  }
  const std::string token = new_token();
  try {
    SpawnOptions so;
    so.pipe_stdin = true;         // its EOF: this process has ended
    so.new_process_group = true;  // a kill of the pilot's group (Ctrl-C, kill -- -PGID) spares it
    so.unset = {kGuardVariable};  // not a process to end
    Child c = spawn({exe, "__sentinel", token}, so);
    g_sentinel = c.pid;
    // The write end stays open, close-on-exec and closed in every child spawn starts: only this
    // process holds it, and the kernel closes it when this process ends.
    (void)c.stdin_fd.release();
  } catch (const Error& e) {
    ANCHOR_LOG_WARN("pilot", "no sentinel ({}): what the program starts may outlive a pilot that is killed", e.what());
    return;
  }
  ::setenv(kGuardVariable, token.c_str(), 1);
}

void run_sentinel(const std::string& token) {
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 && errno != EINTR) break;
  }
  end_marked(kGuardVariable, token);
}

}  // namespace anchor::proc
