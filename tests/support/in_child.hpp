#pragma once
// Runs a piece of a test in a forked child with a deadline, so that a call
// that blocks (a FIFO opened for reading waits for a writer forever) fails the
// test instead of hanging it. The child reports what the call threw, or what
// it returned as text, through a pipe.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include "anchor/error.hpp"

namespace anchor::test {

struct ChildOutcome {
  bool timed_out = false;  // killed at the deadline: the call blocked
  bool threw = false;      // it threw anchor::Error
  ErrorKind kind = ErrorKind::kRuntime;
  std::string text;  // the Error's what() and "\nhint: " and its hint, or what f returned
  double seconds = 0;
};

// Runs f() in a child; kills it after `deadline_s`. f returns a text to report.
inline ChildOutcome in_child(const std::function<std::string()>& f, double deadline_s = 10) {
  ChildOutcome out;
  int fds[2];
  if (::pipe(fds) != 0) return out;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    try {
      msg = "R" + f();
    } catch (const Error& e) {
      msg = "E" + std::to_string(static_cast<int>(e.kind())) + ":" + e.what() + "\nhint: " + e.hint();
    } catch (const std::exception& e) {
      msg = "X" + std::string(e.what());
    }
    for (std::size_t at = 0; at < msg.size();) {
      ssize_t n = ::write(fds[1], msg.data() + at, msg.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (;;) {
    const double left = deadline_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (out.timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out.timed_out || got.empty()) return out;
  if (got[0] == 'E') {
    out.threw = true;
    const auto colon = got.find(':');
    out.kind = static_cast<ErrorKind>(std::stoi(got.substr(1, colon - 1)));
    out.text = got.substr(colon + 1);
  } else {
    out.threw = got[0] == 'X';
    out.text = got.substr(1);
  }
  return out;
}

}  // namespace anchor::test
