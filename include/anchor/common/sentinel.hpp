#pragma once
// Nothing a pilot starts outlives it, even when the pilot itself is SIGKILLed.
//
// A subreaper (process.hpp) ends what a program's ranks leave behind while the pilot runs. Once the
// pilot is gone (a SIGKILL, the OOM killer), nothing is left to do it: the ranks die with it
// (PR_SET_PDEATHSIG), but a daemon one of them started (fork, setsid, fork) is reparented to init
// and runs on. The sentinel covers that: a small process outside the pilot's tree that outlives it.
#include <sys/types.h>

#include <string>

namespace anchor::proc {

// The environment variable that marks every process a pilot starts, and whatever they start.
inline constexpr const char* kGuardVariable = "ANCHOR_PILOT_GUARD";

// Starts the sentinel (`anchor __sentinel`: the `anchor` beside this binary or beside `worker_binary`, else this
// binary if it is anchor's; without one there is none), which holds the read end of a pipe whose write
// end only this process has. When this process ends, however it ends, the sentinel reads EOF and SIGKILLs every process
// whose environment carries this process's token, then exits. The token is set in this process's environment here, so
// every process spawned from now on carries it, and what they start inherits it. Once per process: later calls do
// nothing. A process that scrubs its environment before exec (env -i) escapes, and so does one that runs as another
// user. A sentinel that cannot start is a warning: the pilot runs without it.
void start_sentinel(const std::string& worker_binary = "");

// The sentinel's pid, or -1 when none was started (reap_orphans leaves it running).
pid_t sentinel_pid();

// SIGKILLs every process but this one whose environment (/proc/<pid>/environ, as it was at exec)
// holds `variable=token`, scanning again until a scan finds none left or `budget_s` has passed.
// Returns how many processes it signalled.
int end_marked(const std::string& variable, const std::string& token, double budget_s = 5.0);

// The body of `anchor __sentinel TOKEN`: waits for EOF on stdin, then end_marked. Ignores SIGINT and
// SIGHUP, which a terminal sends to the pilot's whole foreground group.
void run_sentinel(const std::string& token);

}  // namespace anchor::proc
