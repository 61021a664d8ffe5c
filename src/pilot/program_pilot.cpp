// `anchor pilot` with program.command: the user's own training program as the
// pilot's workers (docs/program.md). The same proof as the built-in trainer's
// (supervisor.cpp): worker A trains K steps, saves, trains R more and is
// SIGKILLed inside its second save; worker B, a fresh process per rank,
// restores the newest checkpoint that verifies and trains the R steps again;
// the two accounts are compared per rank, per component. The program speaks
// the protocol of worker_protocol.hpp through python/anchor_pilot.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sentinel.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/environment.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/measure/proc.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/plan/memory_model.hpp"
#include "anchor/run_report/plan_inputs.hpp"
#include "anchor/protocol/determinism.hpp"
#include "anchor/protocol/saved_vs_reported.hpp"
#include "anchor/protocol/worker_protocol.hpp"
#include "anchor/protocol/progress.hpp"
#include "anchor/pilot/observed.hpp"
#include "outcome.hpp"
#include "pilot_context.hpp"
#include "program_pilot.hpp"
#include "signals.hpp"

namespace anchor::pilot {
namespace {

namespace pp = protocol;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How the program is started: resolved once, the same for both workers.
struct Launch {
  std::vector<std::string> argv;  // argv[0] absolute
  std::string cwd;                // absolute
  std::map<std::string, std::string> env;
  std::string dir;  // <run dir>/program: specs and events
};

// What one worker (all its ranks) did.
struct Outcome {
  int status = -1;  // the worker's status: rank 0's, or the first failing rank's
  int failed_rank = 0;
  bool killed_by_us = false;
  std::string error;                               // the program's own account, or how it ended
  std::map<int, pp::WorkerLog> logs;               // per rank
  std::vector<manifest::LoadedLibrary> libraries;  // rank 0's, read at its kill window
  std::string executable;                          // rank 0's /proc/<pid>/exe at its kill window
  std::vector<std::uint64_t> peak_rss;             // per rank: VmHWM as last read while it ran
  double seconds = 0;
};

// A rank's account is a few lines per step (docs/program.md, "The contract"):
// far more is a program writing in a loop, refused as the lines are read,
// before the supervisor parses and holds them.
std::uint64_t max_lines_per_rank(std::int64_t stop_at) {
  return std::max<std::uint64_t>(100000, 8 * static_cast<std::uint64_t>(std::max<std::int64_t>(stop_at, 0)) + 1000);
}
// And in bytes: 16 MiB (the hello line pins every source and distribution) and 64 KiB a step, which
// valid lines that hold no more than the contract's fields never come near. A program that writes
// valid lines in a loop is refused before the supervisor reads them (it held 2 GB for 360 MB).
std::uint64_t max_bytes_per_rank(std::int64_t stop_at) {
  return (16ULL << 20) + (64ULL << 10) * static_cast<std::uint64_t>(std::max<std::int64_t>(stop_at, 0));
}

std::string worker_name(pp::Role r) {
  return r == pp::Role::kReference ? "worker A" : r == pp::Role::kResume ? "worker B" : "the memory probe";
}

// The command, its directory and environment, checked before anything runs.
// Throws Error (kConfig) saying which key is wrong.
Launch resolve_launch(const Pilot& p) {
  const auto& prog = p.cfg.program;
  Launch l;
  l.cwd = prog.cwd.empty() ? p.cfg.base_dir : config::resolve_path(p.cfg, prog.cwd);
  std::error_code ec;
  if (!std::filesystem::is_directory(l.cwd, ec))
    throw Error(ErrorKind::kConfig, "program.cwd " + printable(l.cwd) + " is not a directory",
                "set program.cwd to the directory your program runs in (relative to the config file)");
  l.cwd = std::filesystem::canonical(l.cwd).string();
  // The worker protocol carries paths as JSON text (docs/program.md): a path the
  // program is told or reports must be UTF-8, or it would reach the other side changed.
  for (const auto& [what, path, how] :
       {std::tuple<const char*, std::string, const char*>{
            prog.cwd.empty() ? "the config file's directory (program.cwd's default)" : "program.cwd", l.cwd,
            "set program.cwd to a directory"},
        {"the run directory", p.run_dir, "pass --run-dir"},
        {"the checkpoint directory", p.ckpt_dir, "set checkpoint.dir to a directory"}})
    if (!is_valid_utf8(path))
      throw Error(ErrorKind::kConfig,
                  std::string(what) + " " + printable(path) +
                      " is not UTF-8: a program pilot tells the program its paths, and the program reports its "
                      "own, as JSON text, which holds UTF-8 only",
                  std::string(how) + " whose path is UTF-8 (anchor's built-in pilot takes any path)");
  l.argv = prog.command;
  for (const auto& e : prog.env) {
    const auto eq = e.find('=');
    l.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  const std::string& exe = l.argv[0];
  std::string found;
  const auto own_path = l.env.find("PATH");  // the PATH the program runs with, when program.env sets one
  if (exe.find('/') != std::string::npos) {
    found = exe[0] == '/' ? exe : l.cwd + "/" + exe;
    if (::access(found.c_str(), X_OK) != 0) found.clear();
  } else if (own_path != l.env.end()) {
    found = proc::find_in_dirs(exe, own_path->second, l.cwd);  // the program runs in program.cwd
  } else {
    found = proc::find_on_path(exe);
  }
  if (found.empty())
    throw Error(ErrorKind::kConfig,
                "program.command[0] '" + printable(exe) + "' is not an executable " +
                    (exe.find('/') != std::string::npos ? "file (relative to " + printable(l.cwd) + ")"
                     : own_path != l.env.end()          ? std::string("in program.env's PATH")
                                                        : std::string("in PATH")),
                "name the interpreter or script as you run it, e.g. [python3, train.py]; anchor starts it without a "
                "shell, in program.cwd");
  l.argv[0] = found;
  l.dir = p.run_dir + "/program";
  return l;
}

void kill_all(const std::vector<proc::Child>& ranks, const std::vector<std::optional<int>>& ended, int sig) {
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (!ended[r]) ::kill(-ranks[r].pid, sig);  // its process group: DataLoader workers too
}

// What the console shows of rank 0's steps (progress.hpp): about 20 step lines
// per worker at info, each one at debug, worded as the built-in worker's.
// Plain lines only, on a terminal too: the program writes to the same
// terminal, so a line redrawn in place would be torn by its output.
class ProgramSteps {
 public:
  ProgramSteps(std::string who, std::int64_t stop_at) : who_(std::move(who)), end_(stop_at), account_(stop_at) {}
  void saw(const pp::StepLine& s) {
    const auto shown = account_.saw(s);
    if (!shown) return;
    if (!rule_) rule_.emplace(s.step - 1, end_);  // the first step shown says where the worker started
    ANCHOR_LOG_AT(rule_->shown(shown->done) ? log::Level::kInfo : log::Level::kDebug, "train_step", "{}",
                  protocol::step_line(who_, *shown));
  }

 private:
  std::string who_;
  std::int64_t end_;
  protocol::StepAccount account_;
  std::optional<protocol::StepLineRule> rule_;
};

// The ranks a worker runs at: worker B's own count when it resumes at another world size
// (pilot.resume_world_size), else the pilot's.
int world_of(const Pilot& p, const pp::Spec& spec) {
  return spec.role == pp::Role::kResume && spec.reshard ? static_cast<int>(spec.reshard->second) : p.nproc;
}

// Writes the spec and starts the program once per rank with it, each in its own process group.
std::vector<proc::Child> start_program_ranks(Pilot& p, const Launch& l, const pp::Spec& spec, const std::string& name) {
  const std::string spec_path = l.dir + "/" + name + ".spec.json";
  fs::atomic_write_file(spec_path, dump_json(pp::to_json(spec), 2) + "\n");
  std::error_code ec;
  std::filesystem::remove(spec.events, ec);  // a reused run directory's
  PilotNodes* const nodes = p.opts.nodes;    // several nodes: this one runs ranks 0 .. local_world_size - 1
  // Also for one rank: concurrent pilots must not collide. Several nodes: reachable from the others.
  const int port = nodes ? dist::free_port() : dist::free_loopback_port();
  std::vector<proc::Child> ranks;
  const int world = world_of(p, spec);
  const int local = nodes ? nodes->local_world_size() : world;
  for (int r = 0; r < local; ++r) {
    proc::SpawnOptions so;
    so.env = l.env;
    so.unset = dist::outer_launch_variables();  // under torchrun or srun: the program's rank is the one anchor gives
    for (auto& [k, v] : nodes ? dist::placed_launch_env(r, world, r, local, nodes->master_addr(), port)
                              : dist::self_launch_env(r, world, port))
      so.env[k] = v;
    so.env["ANCHOR_PILOT_SPEC"] = spec_path;
    so.cwd = l.cwd;
    so.die_with_parent = true;
    so.new_process_group = true;
    ranks.push_back(proc::spawn(l.argv, so));
  }
  json pids = json::array();
  for (const auto& c : ranks) pids.push_back(c.pid);
  p.events->write({{"event", "worker_started"}, {"worker", name}, {"program", l.argv}, {"pids", pids}}, "supervisor");
  if (nodes) {  // the other nodes start theirs: the same command, environment and spec
    json env = l.env;
    env["ANCHOR_PILOT_SPEC"] = spec_path;
    try {
      nodes->start_program(name, port, {{"argv", l.argv}, {"cwd", l.cwd}, {"env", env}});
    } catch (const Error&) {  // no rank of this node is left waiting for the others
      kill_all(ranks, std::vector<std::optional<int>>(ranks.size()), SIGKILL);
      for (const auto& c : ranks) proc::wait_exit(c.pid);
      throw;
    }
  }
  return ranks;
}

// One worker of the program once its ranks run (run_program_worker): follows
// their events file, samples their memory, and stops them as the pilot needs.
class ProgramRun {
 public:
  ProgramRun(Pilot& p, const pp::Spec& spec, std::string name, std::vector<proc::Child> ranks)
      : p_(p),
        spec_(spec),
        name_(std::move(name)),
        ranks_(std::move(ranks)),
        nodes_(p.opts.nodes),
        t0_(Clock::now()),
        deadline_(t0_ +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.cfg.program.timeout_s))),
        ended_(ranks_.size()),
        reader_(spec.events, max_lines_per_rank(spec.stop_at) * static_cast<std::uint64_t>(world_of(p, spec)),
                max_bytes_per_rank(spec.stop_at) * static_cast<std::uint64_t>(world_of(p, spec))),
        letter_(spec.role == pp::Role::kReference ? "A"
                : name_ == "control"              ? "C"
                : spec.role == pp::Role::kResume  ? "B"
                                                  : "probe"),
        watch_(letter_, /*may_redraw=*/false),  // the program writes to the same terminal
        steps_(letter_ + (world_of(p, spec) > 1 ? " rank 0" : ""), spec.stop_at) {
    w_.peak_rss.assign(ranks_.size(), 0);
    watch_.started(name_);
  }

  Outcome run() {
    for (;;) {
      guarded_follow();
      watch_.tick();
      if (!w_.killed_by_us) sample_rss();
      if (all_ended()) break;
      if (interrupt_signal()) {
        stop_on_signal();
        break;
      }
      if (stop_others_at_ && Clock::now() > *stop_others_at_) kill_all(ranks_, ended_, SIGKILL);
      if (Clock::now() > deadline_ && !w_.killed_by_us) {
        kill_all(ranks_, ended_, SIGKILL);
        if (w_.error.empty())
          w_.error = worker_title() + " ran past program.timeout_s (" + dump_json(p_.cfg.program.timeout_s) +
                     " s) and was killed";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    guarded_follow();  // what it wrote last
    return finish();
  }

 private:
  // The process that runs Python: the rank's own pid, or the interpreter a wrapper
  // (`uv run`, a shell script) started in the rank's process group, as its hello says.
  pid_t python_pid(int r) {
    const auto& log = w_.logs[r];
    if (log.hello && log.hello->pid && ::getpgid(static_cast<pid_t>(*log.hello->pid)) == ranks_[r].pid)
      return static_cast<pid_t>(*log.hello->pid);
    return ranks_[r].pid;
  }

  void sample_rss() {  // the peak RSS of every rank's Python, read by the supervisor as it runs
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      w_.peak_rss[r] = std::max(w_.peak_rss[r], measure::read_proc_memory(python_pid(static_cast<int>(r))).hwm_bytes);
  }

  void kill_now() {
    // What the program loaded, while it still runs; then the real thing, on every rank.
    sample_rss();
    try {
      const pid_t py = python_pid(0);
      w_.libraries = manifest::loaded_shared_libraries(py);
      w_.executable = std::filesystem::read_symlink("/proc/" + std::to_string(py) + "/exe").string();
    } catch (const std::exception& ex) {
      ANCHOR_LOG_WARN("pilot", "could not read the program's loaded libraries: {}", ex.what());
    }
    kill_all(ranks_, ended_, SIGKILL);
    if (nodes_) nodes_->kill(name_);  // and every other node's ranks, relayed through the store
    w_.killed_by_us = true;
    json pids = json::array();
    for (const auto& ch : ranks_) pids.push_back(ch.pid);
    p_.events->write({{"stage", "kill"}, {"event", "sigkill_sent"}, {"pids", pids}, {"point", kill_point_}},
                     "supervisor");
  }

  // Refuses a line the program had no business writing: another rank's, too many, a step past stop_at.
  void check_line(const pp::Event& e, const std::string& who) {
    if (++lines_[e.rank] > max_lines_per_rank(spec_.stop_at))
      throw Error(ErrorKind::kRuntime,
                  printable(spec_.events) + ": " + who + " wrote more than " +
                      std::to_string(max_lines_per_rank(spec_.stop_at)) + " lines for a pilot of " +
                      std::to_string(spec_.stop_at) + " steps",
                  "anchor_pilot writes a few lines per step; does the program call it in an inner loop, or write "
                  "to the events file itself? (docs/program.md, \"The contract\")");
    if (const auto* s = std::get_if<pp::StepLine>(&e.body); s && s->step > spec_.stop_at)
      throw Error(ErrorKind::kRuntime,
                  who + " reported step " + std::to_string(s->step) + ", past step " + std::to_string(spec_.stop_at) +
                      " where anchor asked it to stop",
                  "end the training loop at pilot.stop_at: for step in range(start + 1, pilot.stop_at + 1) "
                  "(docs/program.md, \"The Python helper\")");
  }

  void take_line(const pp::Event& e) {
    if (e.rank >= nproc())
      throw Error(ErrorKind::kRuntime,
                  printable(spec_.events) + ": a line of rank " + std::to_string(e.rank) + " from a worker of " +
                      std::to_string(nproc()) + " rank(s)",
                  "the program must not set RANK itself; anchor sets it (docs/program.md, \"The contract\")");
    const std::string who = worker_title() + (nproc() > 1 ? " rank " + std::to_string(e.rank) : "");
    check_line(e, who);
    if (e.type != "program") p_.events->write(e.raw, "program-" + name_);
    w_.logs[e.rank].add(e);
    if (const auto* s = std::get_if<pp::StepLine>(&e.body); s && e.rank == 0 && spec_.role != pp::Role::kProbe)
      steps_.saw(*s);
    if (const auto* err = std::get_if<pp::ErrorLine>(&e.body); err && w_.error.empty())
      w_.error = worker_title() + (nproc() > 1 ? " rank " + std::to_string(e.rank) : "") + ": " + err->message;
    const auto* c = std::get_if<pp::CheckpointLine>(&e.body);
    if (c && c->phase == "kill_window" && e.rank == 0 && spec_.role == pp::Role::kReference && !kill_at_) {
      kill_at_ = Clock::now() + std::chrono::seconds(10);
      kill_point_ = c->point;
    }
  }

  void follow() {
    for (auto& e : reader_.poll()) take_line(e);
    // Every rank reports its save's digests before it writes a file; rank 0 may be in its
    // kill window before another rank has said them (10 s at most, then the kill regardless;
    // at once when a rank that has not said them has ended: it never will).
    if (kill_at_ && !w_.killed_by_us) {
      bool all_said = true, one_ended = false;
      for (int r = 0; r < nproc(); ++r) {
        if (w_.logs[r].digests_at("save", spec_.stop_at)) continue;
        all_said = false;
        const auto i = static_cast<std::size_t>(r);
        if (i >= ranks_.size()) continue;  // another node's rank: the deadline stands
        if (!ended_[i]) ended_[i] = proc::try_wait(ranks_[i].pid);
        one_ended = one_ended || ended_[i].has_value();
      }
      if (all_said || one_ended || Clock::now() > *kill_at_) kill_now();
    }
  }

  // A line anchor cannot read (or a file it cannot open) ends the worker: no rank is left running.
  void guarded_follow() {
    try {
      follow();
    } catch (...) {
      kill_all(ranks_, ended_, SIGKILL);
      for (std::size_t r = 0; r < ranks_.size(); ++r)
        if (!ended_[r]) ended_[r] = proc::wait_exit(ranks_[r].pid);
      end_leftovers();
      throw;
    }
  }

  // Every rank has ended: what they started ends too. Each rank's process group (a DataLoader's
  // workers), then whatever left it and was reparented to this subreaper (a double fork, setsid).
  void end_leftovers() {
    std::vector<pid_t> groups;
    for (const auto& c : ranks_) {
      ::kill(-c.pid, SIGKILL);
      groups.push_back(c.pid);
    }
    if (const int n = proc::reap_orphans(groups); n > 0) {
      ANCHOR_LOG_WARN("pilot", "{} ended {} process(es) the program left running after its ranks ended", worker_title(),
                      n);
      p_.events->write({{"event", "orphans_ended"}, {"worker", name_}, {"count", n}}, "supervisor");
    }
  }

  // Reaps the ranks that ended; true once all have. The first failure gives the others a grace.
  bool all_ended() {
    bool all = true;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      if (!ended_[r]) ended_[r] = proc::try_wait(ranks_[r].pid);
      if (!ended_[r]) {
        all = false;
        continue;
      }
      if (*ended_[r] != 0 && !w_.killed_by_us && !stop_others_at_)
        stop_others_at_ = Clock::now() + std::chrono::seconds(10);
    }
    return all;
  }

  void stop_on_signal() {
    // SIGTERM, as torchrun forwards it; a rank still there 10 s later gets SIGKILL.
    kill_all(ranks_, ended_, SIGTERM);
    const auto grace_end = Clock::now() + std::chrono::seconds(10);
    for (bool left = true; left;) {
      left = false;
      for (std::size_t r = 0; r < ranks_.size(); ++r)
        if (!ended_[r] && !(ended_[r] = proc::try_wait(ranks_[r].pid))) left = true;
      if (left && Clock::now() > grace_end) kill_all(ranks_, ended_, SIGKILL);
      if (left) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Every rank has ended: the worker's status is rank 0's, or the first failing rank's.
  // Once anchor killed them, a rank that ended otherwise ended on its own, before the kill.
  Outcome finish() {
    w_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    end_leftovers();
    const int expected = w_.killed_by_us ? 128 + SIGKILL : 0;
    w_.status = *ended_[0];
    for (std::size_t r = 1; r < ranks_.size(); ++r)
      if (w_.status == expected && *ended_[r] != expected) {
        w_.status = *ended_[r];
        w_.failed_rank = static_cast<int>(r);
      }
    if (nodes_) collect_remote_ranks(expected);
    if (w_.error.empty() && w_.killed_by_us && w_.status != expected)
      w_.error = worker_title() + (nproc() > 1 ? " rank " + std::to_string(w_.failed_rank) : "") + " " +
                 proc::describe_exit(w_.status) + " before its kill window (its output is above; its events are in " +
                 printable(spec_.events) + ")";
    if (w_.error.empty() && w_.status != 0 && !w_.killed_by_us)
      w_.error = worker_title() + (nproc() > 1 ? " rank " + std::to_string(w_.failed_rank) : "") + " " +
                 proc::describe_exit(w_.status) + " (its output is above; its events are in " +
                 printable(spec_.events) + ")";
    return w_;
  }

  // The other nodes' ranks, once this node's have ended: stopped first when this side failed (or was
  // interrupted); one that ended otherwise than this node's is the worker's failure, named with its node.
  void collect_remote_ranks(int expected) {
    const bool stop = (w_.status != expected) || interrupt_signal() || (!w_.error.empty() && !w_.killed_by_us);
    try {
      json remote = json::array();
      for (const auto& rr : nodes_->collect(name_, stop)) {
        remote.push_back(
            {{"rank", rr.rank}, {"node", rr.node}, {"host", rr.host}, {"status", rr.status}, {"killed", rr.killed}});
        const bool as_expected = w_.killed_by_us ? rr.killed || rr.status == 128 + SIGKILL : rr.status == 0;
        if (as_expected || w_.status != expected) continue;
        w_.status = rr.status;
        w_.failed_rank = rr.rank;
        if (w_.error.empty())
          w_.error = worker_title() + " rank " + std::to_string(rr.rank) + " (node " + std::to_string(rr.node) + ", " +
                     rr.host + ") " + proc::describe_exit(rr.status);
      }
      p_.events->write({{"event", "remote_ranks_ended"}, {"worker", name_}, {"ranks", remote}}, "supervisor");
    } catch (const Error& e) {
      if (w_.status == expected) w_.status = 1;
      if (w_.error.empty()) w_.error = e.what();
    }
  }

  int nproc() const { return world_of(p_, spec_); }
  std::string worker_title() const { return name_ == "control" ? "the determinism control" : worker_name(spec_.role); }

  Pilot& p_;
  const pp::Spec& spec_;
  const std::string name_;
  const std::vector<proc::Child> ranks_;  // this node's: ranks 0 .. ranks_.size() - 1
  PilotNodes* const nodes_;               // several nodes: the others run the rest
  Outcome w_;
  const Clock::time_point t0_;
  const Clock::time_point deadline_;
  std::vector<std::optional<int>> ended_;
  pp::EventReader reader_;
  std::optional<Clock::time_point> stop_others_at_;  // a rank failed: the others get a grace, then SIGKILL
  std::optional<Clock::time_point>
      kill_at_;  // rank 0 is in its kill window: kill once every rank said its save digests
  std::string kill_point_;
  std::map<int, std::uint64_t> lines_;  // per rank
  const std::string letter_;
  protocol::StageWatch watch_;
  ProgramSteps steps_;
};

// Starts the program once per rank with the spec, follows its events file,
// SIGKILLs every rank at rank 0's kill window (reference), stops every rank
// when one fails, the program runs past program.timeout_s, or the supervisor
// is interrupted.
// `tag` names its spec file and its events in events.jsonl (the role by default).
Outcome run_program_worker(Pilot& p, const Launch& l, const pp::Spec& spec, const std::string& tag = "") {
  const std::string name = tag.empty() ? pp::role_name(spec.role) : tag;
  ProgramRun run(p, spec, name, start_program_ranks(p, l, spec, name));
  return run.run();
}

// A worker's stage record from its own account (rank 0).
json worker_stage(const std::string& stage, const Outcome& w, json figures) {
  return {{"stage", stage}, {"status", "passed"}, {"seconds", w.seconds}, {"figures", std::move(figures)}};
}

json steps_json(const pp::WorkerLog& log) {
  json out = json::array();
  for (const auto& s : log.steps) {
    json e = {{"step", s.step}, {"loss", s.loss.known ? json(s.loss.value) : json()}};
    if (s.grad_norm.known) e["grad_norm"] = s.grad_norm.value;
    if (s.lr.known) e["lr"] = s.lr.value;
    if (s.tokens) e["tokens"] = *s.tokens;
    if (s.data_wait_s) e["data_wait_s"] = *s.data_wait_s;
    if (s.compute_s) e["compute_s"] = *s.compute_s;
    out.push_back(std::move(e));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The training FLOPs per token of the program's declared shape, and where the figure comes from ({0, ""}
// without a shape).
std::pair<double, std::string> flops_per_token(const pp::Hello& h) {
  if (!h.shape) return {0.0, ""};
  const auto& s = *h.shape;
  const double n = static_cast<double>(h.parameters.value_or(0));
  if (s.flops_per_token)
    return {*s.flops_per_token, "the program's own figure (anchor_pilot.shape(flops_per_token=...))"};
  if (s.n_layer && s.n_embd)
    return {6.0 * n + 12.0 * static_cast<double>(*s.n_layer) * static_cast<double>(*s.n_embd) *
                          static_cast<double>(s.seq_len),
            "6 x parameters + 12 x n_layer x n_embd x seq_len (PaLM appendix B; the program's n_layer "
            "and n_embd)"};
  return {6.0 * n,
          "6 x parameters; the attention term is left out (pass n_layer and n_embd to "
          "anchor_pilot.shape)"};
}

// measurements.model: the parameters, and the shape the program declared
// (anchor_pilot.shape) with its training FLOPs per token.
json model_json(const pp::Hello& h) {
  json m;
  if (h.parameters) m["parameters"] = *h.parameters;
  if (!h.shape) return m;
  const auto& s = *h.shape;
  m["micro_batch"] = s.micro_batch;
  m["seq_len"] = s.seq_len;
  m["grad_accum"] = s.grad_accum;
  m["precision"] = s.precision;
  m["n_layer"] = s.n_layer ? json(*s.n_layer) : json();
  m["n_embd"] = s.n_embd ? json(*s.n_embd) : json();
  const auto [flops, source] = flops_per_token(h);
  m["flops_per_token"] = flops;
  m["flops_source"] = source;
  return m;
}

std::string fmt_count(long double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0Lf", v);
  return buf;
}

// On CPU the peak is the process's VmHWM: the interpreter, its libraries and
// the data it loaded count in it, and would not be on a GPU. What the process
// held before its first step beyond its parameters is taken out of every
// point (the same in each process of one program). 0 on a GPU.
std::int64_t held_outside_the_step(const pp::StepMemoryLine& sm) {
  if (sm.device != "cpu" || !sm.baseline_bytes) return 0;
  return std::max<std::int64_t>(0, *sm.baseline_bytes - sm.parameters_bytes);
}

// One memory point of the plan's model: rank `rank`'s step_memory line at its shape.
json memory_point(const pp::StepMemoryLine& sm, int rank, std::int64_t micro_batch, std::int64_t seq_len,
                  const std::string& from) {
  json peak;
  if (sm.peak_bytes) peak = std::max<std::int64_t>(0, *sm.peak_bytes - held_outside_the_step(sm));
  return {{"micro_batch", micro_batch},
          {"seq_len", seq_len},
          {"peak_allocated_bytes", peak},
          {"raw_peak_bytes", sm.peak_bytes ? json(*sm.peak_bytes) : json()},
          {"excluded_bytes", held_outside_the_step(sm)},
          {"device", sm.device},
          {"rank", rank},
          {"from", from}};
}

// The step_memory line of the rank whose step peaked highest, and that rank (the
// lowest on a tie): the plan must fit the rank that holds most, which under DDP is
// often rank 0 but need not be. {-1, null} when no rank reported a peak.
std::pair<int, const pp::StepMemoryLine*> highest_step_memory(const Outcome& o) {
  std::pair<int, const pp::StepMemoryLine*> best{-1, nullptr};
  std::int64_t best_peak = 0;
  for (const auto& [rank, log] : o.logs) {
    if (!log.step_memory || !log.step_memory->peak_bytes) continue;
    const std::int64_t peak = *log.step_memory->peak_bytes - held_outside_the_step(*log.step_memory);
    if (!best.second || peak > best_peak) {
      best_peak = peak;
      best = {rank, &*log.step_memory};
    }
  }
  return best;
}

// The step's figures from the reference's step lines: medians over its steps
// after the first, which warms up. `flops_per_token` (0: unknown) and the
// reference's matmul rate give the MFU estimate, as the built-in's; the
// communication is the profiled step's (worker B's last), rank 0's.
json step_figures(const Pilot& p, const pp::WorkerLog& ref, const pp::WorkerLog& res, double flops_per_token) {
  std::vector<double> secs, waits, computes, tokens;
  for (std::size_t i = 1; i < ref.steps.size(); ++i) {
    const auto& s = ref.steps[i];
    if (!s.compute_s) continue;
    waits.push_back(s.data_wait_s.value_or(0));
    computes.push_back(*s.compute_s);
    secs.push_back(*s.compute_s + s.data_wait_s.value_or(0));
    if (s.tokens) tokens.push_back(static_cast<double>(*s.tokens));
  }
  const double step_s = median(secs), tok = median(tokens);
  json out = {{"source", "the program's step lines (median over the reference's steps after the first)"},
              {"steps_measured", secs.size()},
              {"seconds", step_s},
              {"data_wait_s", median(waits)},
              {"compute_s", median(computes)},
              {"stall_percent", step_s > 0 ? 100.0 * median(waits) / step_s : 0.0},
              {"tokens", tokens.empty() ? json() : json(tok)},
              {"tokens_per_s", tokens.empty() || step_s <= 0 ? json() : json(tok / step_s)},  // one rank's
              {"tokens_per_s_all_ranks", tokens.empty() || step_s <= 0 ? json() : json(tok / step_s * p.nproc)},
              {"world_size", p.nproc}};
  if (ref.hello && ref.hello->shape) {
    out["micro_batch"] = ref.hello->shape->micro_batch;
    out["grad_accum"] = ref.hello->shape->grad_accum;
  }
  const double matmul = res.profile ? res.profile->matmul_flops.value_or(0) : 0;
  if (!tokens.empty() && step_s > 0 && flops_per_token > 0 && matmul > 0) {
    const double achieved = flops_per_token * tok / step_s;
    out["achieved_flops"] = achieved;
    out["reference_matmul_flops"] = matmul;
    // An estimate: against a measured 512x512 fp32 matmul on this device, not a datasheet peak.
    out["mfu_estimate"] = achieved / matmul;
  }
  if (res.profile && res.profile->comm_s) {
    out["comm_s"] = *res.profile->comm_s;
    out["comm_source"] = "the collectives' spans (c10d, Gloo, NCCL) in the profiled step (worker B's step " +
                         std::to_string(res.profile->step) + ", rank 0); DDP overlaps them with the backward pass";
  }
  return out;
}

// One stage's peaks from the helper's lines (their window's), over a worker's
// ranks and lines: each the highest any reached.
struct StagePeaks {
  std::optional<std::int64_t> allocated, reserved, rss, total;
  std::string device, window;
  std::size_t ranks = 1;
  // As report.json's stages hold them (-1: not measured: a CPU has no allocator statistics the helper reads).
  json to_json() const {
    const bool cuda = device.rfind("cuda", 0) == 0;
    json j = {{"peak_allocated_bytes", allocated.value_or(-1)},
              {"peak_reserved_bytes", reserved.value_or(-1)},
              {"peak_rss_bytes", rss ? json(*rss) : json()},
              {"device", device},
              {"window", window},
              {"source", cuda ? "torch.cuda.max_memory_allocated and max_memory_reserved over the window; the "
                                "process's peak RSS (VmHWM)"
                              : "the process's peak RSS (VmHWM: interpreter, libraries and data included) over the "
                                "window"}};
    if (total) j["device_total_bytes"] = *total;
    if (ranks > 1) j["ranks"] = "the highest of " + std::to_string(ranks) + " ranks";
    return j;
  }
};

std::optional<StagePeaks> stage_peaks(const Outcome& o, const std::string& stage) {
  StagePeaks p;
  p.ranks = o.logs.size();
  auto up = [](std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) {
    if (b && (!a || *b > *a)) a = b;
  };
  for (const auto& [rank, log] : o.logs)
    for (const auto& l : log.memory) {
      if (l.stage != stage || l.window.empty()) continue;
      p.device = l.device, p.window = l.window;
      up(p.allocated, l.peak_allocated_bytes), up(p.reserved, l.peak_reserved_bytes), up(p.rss, l.peak_rss_bytes);
      up(p.total, l.total_bytes);
    }
  if (p.device.empty()) return std::nullopt;
  return p;
}

std::optional<json> stage_peaks_json(const Outcome& o, const std::string& stage) {
  if (auto p = stage_peaks(o, stage)) return p->to_json();
  return std::nullopt;
}

// Each stage's peaks: worker A's load, step, eval and save; worker B's restore and the evaluate() after it.
std::map<std::string, StagePeaks> stage_memory(const Outcome& a, const Outcome& b) {
  std::map<std::string, StagePeaks> stages;
  for (const char* s : {"load", "train", "eval", "checkpoint_save"})
    if (auto p = stage_peaks(a, s)) stages[s] = std::move(*p);
  for (const char* s : {"restore", "eval_after_restore"})
    if (auto p = stage_peaks(b, s)) stages[s] = std::move(*p);
  return stages;
}

// The program's own memory lines (Pilot.memory(stage)), rank 0's of both workers.
json memory_stage_lines(const pp::WorkerLog& ref, const pp::WorkerLog& res) {
  json mem = json::array();
  for (const auto* log : {&ref, &res})
    for (const auto& l : log->memory) {
      if (!l.window.empty()) continue;  // the helper's own stage lines: measurements.memory.stages
      json e = {{"worker", log == &ref ? "reference" : "resume"}, {"stage", l.stage}, {"device", l.device}};
      if (l.rss_bytes) e["rss_bytes"] = *l.rss_bytes;
      if (l.allocated_bytes) e["allocated_bytes"] = *l.allocated_bytes;
      if (l.reserved_bytes) e["reserved_bytes"] = *l.reserved_bytes;
      if (l.max_allocated_bytes) e["max_allocated_bytes"] = *l.max_allocated_bytes;
      if (l.total_bytes) e["device_total_bytes"] = *l.total_bytes;
      mem.push_back(std::move(e));
    }
  return mem;
}

// Every rank's peak RSS as anchor read it, both workers'.
json peak_rss_json(const Outcome& a, const Outcome& b) {
  json peaks = json::array();
  for (const auto* w : {&a, &b})
    for (std::size_t r = 0; r < w->peak_rss.size(); ++r)
      peaks.push_back({{"worker", w == &a ? "reference" : "resume"}, {"rank", r}, {"peak_rss_bytes", w->peak_rss[r]}});
  return peaks;
}

// The plan's memory model into `memory`: the reference's second step at the
// declared shape (from `sm`, rank `mem_rank`'s), and the probe's points.
void add_memory_model(json& memory, const Pilot& p, const pp::Shape& shape, const pp::StepMemoryLine& sm, int mem_rank,
                      bool from_highest, const json& probe_points) {
  json points = json::array({memory_point(sm, mem_rank, shape.micro_batch, shape.seq_len, "reference")});
  for (const auto& pt : probe_points) points.push_back(pt);
  const std::int64_t excluded = held_outside_the_step(sm);
  memory["source"] = sm.peak_source + " on " + sm.device + ", the peak of a process's second step" +
                     (p.nproc <= 1   ? std::string()
                      : from_highest ? " (of the rank whose peak was highest: rank " + std::to_string(mem_rank) + ")"
                                     : std::string(" (rank 0's: no rank reported a peak)")) +
                     (excluded ? ", less what each process held before its first step beyond its parameters "
                                 "(excluded_bytes: interpreter, libraries, data)"
                               : "");
  memory["precision"] = shape.precision;
  memory["points"] = points;
  memory["state_bytes"] = {
      {"parameters", sm.parameters_bytes}, {"gradients", sm.gradients_bytes}, {"optimizer", sm.optimizer_bytes}};
  memory["baseline_bytes"] = sm.baseline_bytes ? json(*sm.baseline_bytes - excluded) : json();
  memory["stage_sources"] =
      "peak RSS (VmHWM) of every rank read by anchor while it ran; the program's "
      "memory lines (Pilot.memory(stage))";
}

// The save's (the reference's) and the restore's (the resume's) size and time, when they said them.
void add_checkpoint_figures(json& m, const pp::WorkerLog& ref, const pp::WorkerLog& res, std::int64_t save_step) {
  if (const auto* s = ref.checkpoint("save", "end", save_step); s && s->bytes && s->seconds)
    m["checkpoint_save"] = {{"step", save_step},
                            {"bytes", *s->bytes},
                            {"seconds", *s->seconds},
                            {"gb_per_s", *s->seconds > 0 ? static_cast<double>(*s->bytes) / *s->seconds / 1e9 : 0.0}};
  if (const auto* r = res.checkpoint("restore", "end", save_step); r && r->bytes && r->seconds)
    m["checkpoint_restore"] = {{"step", save_step},
                               {"bytes", *r->bytes},
                               {"seconds", *r->seconds},
                               {"gb_per_s", *r->seconds > 0 ? static_cast<double>(*r->bytes) / *r->seconds / 1e9 : 0.0},
                               {"includes", "reading, verifying every SHA-256 and load_state_dict of every component"}};
}

// measurements: the step (median over the reference's steps after the first,
// which warms up), memory per stage, the save and restore, from rank 0; the
// plan's memory points from the rank whose step peaked highest.
json measurements(const Pilot& p, const Outcome& a, const Outcome& b, std::int64_t save_step,
                  const json& probe_points) {
  const auto& ref = a.logs.at(0);
  const auto& res = b.logs.at(0);
  json m;
  if (ref.hello) m["model"] = model_json(*ref.hello);
  m["step"] = step_figures(p, ref, res, ref.hello ? flops_per_token(*ref.hello).first : 0.0);
  auto [mem_rank, highest] = highest_step_memory(a);
  const bool from_highest = highest != nullptr;
  if (!highest && ref.step_memory) mem_rank = 0, highest = &*ref.step_memory;
  // Where the program ran its step, as its step_memory line says (anchor's `device` key does not reach it).
  if (highest) m["model"]["device"] = highest->device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  json peaks = peak_rss_json(a, b);
  const auto peaks_of = stage_memory(a, b);
  json stages = json::object();
  for (const auto& [name, st] : peaks_of) stages[name] = st.to_json();
  json workers = json::object();
  for (const auto* w : {&a, &b}) {
    std::uint64_t most = 0;
    for (const auto v : w->peak_rss) most = std::max<std::uint64_t>(most, v);
    workers[w == &a ? "reference" : "resume"] = {{"peak_rss_bytes", most}};
  }
  json memory = {{"source",
                  "the helper's lines: each stage's peaks over its window (docs/program.md, \"What anchor "
                  "measures\"); the peak RSS (VmHWM) of every rank, read by anchor while it ran"},
                 {"peak_rss", peaks},
                 {"workers", workers},
                 {"stages", stages},
                 {"program_lines", memory_stage_lines(ref, res)}};
  for (const auto& [name, st] : peaks_of)
    if (st.total) memory["device_total_bytes"] = *st.total;
  const auto train = peaks_of.find(std::string("train"));
  if (train != peaks_of.end())
    memory["step"] = {{"peak_allocated_bytes", train->second.allocated.value_or(-1)},
                      {"peak_reserved_bytes", train->second.reserved.value_or(-1)},
                      {"peak_rss_bytes", train->second.rss ? json(*train->second.rss) : json()}};
  m["memory"] = std::move(memory);
  // The plan's memory model: the reference's second step at the declared shape, and the probe's points.
  const auto* shape = ref.hello && ref.hello->shape ? &*ref.hello->shape : nullptr;
  if (shape && highest) add_memory_model(m["memory"], p, *shape, *highest, mem_rank, from_highest, probe_points);
  add_checkpoint_figures(m, ref, res, save_step);
  return m;
}

// The report's program section: what ran, and what it said it runs on.
json program_section(const Pilot& p, const Launch& l, const Outcome& a) {
  json j = {{"command", l.argv}, {"cwd", printable(l.cwd)}, {"world_size", p.nproc}, {"protocol", pp::kProtocol}};
  if (a.logs.count(0) && a.logs.at(0).hello) {
    const auto& h = *a.logs.at(0).hello;
    j["anchor_pilot"] = h.anchor_pilot;
    j["versions"] = {{"torch", h.versions.torch},
                     {"cuda", h.versions.cuda},
                     {"cudnn", h.versions.cudnn},
                     {"nccl", h.versions.nccl},
                     {"python", h.versions.python}};
  }
  return j;
}

json torn_temps(const std::string& ckpt_dir) {
  json torn = json::array();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ckpt_dir, ec))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      torn.push_back(printable(e.path().filename().string()));
  return torn;
}

// One program pilot as it goes: what each step leaves for the next.
struct Run {
  explicit Run(Pilot& pilot) : p(pilot) {}
  Pilot& p;
  std::int64_t k = 0, last = 0;  // K and K+R
  Launch l;
  pp::Spec spec;
  Outcome a, b;
  std::optional<protocol::RankVerdicts> verdict;  // the comparison
  json probe_points = json::array();              // the memory probe's, for the plan
  bool observed = false;                          // the program's own save and load code (hello "checkpoints")
  observed::TornSave torn;                        // observed: what the kill left of the save of K+R
  std::vector<observed::HashedSave> saves;        // observed: the finished saves, pinned at the kill
  std::int64_t from = 0;                          // the save worker B resumed from (K, or a later finished one)
  std::optional<pp::DeterminismVerdict> control;  // the determinism control, when it ran
  std::vector<pp::Spec> probes;                   // the memory probe's points, one spec each
  bool probes_in_b = false;                       // worker B was told to fork them (spec probe_more)
};

// Observed mode: the files the finished saves of a worker reported (every rank), and those of one step.
std::set<std::string> finished_files(const Outcome& o, std::optional<std::int64_t> step = std::nullopt) {
  std::set<std::string> out;
  for (const auto& [rank, log] : o.logs)
    for (const auto& c : log.checkpoints)
      if (c.op == "save" && c.phase == "end" && (!step || (c.step && *c.step == *step)))
        out.insert(c.files.begin(), c.files.end());
  return out;
}

// Observed mode: the step worker B's own load restored (rank 0), 0 when it reports none.
std::int64_t observed_restore(const Outcome& b) {
  const auto it = b.logs.find(0);
  if (it == b.logs.end()) return 0;
  std::int64_t step = 0;
  for (const auto& c : it->second.checkpoints)
    if (c.op == "restore" && c.phase == "end" && c.step) step = *c.step;
  return step;
}

// Observed mode: the files of the torn save that worker B's own load opened (its "read" lines, every rank).
std::vector<std::string> torn_files_read(const Outcome& b, const observed::TornSave& torn) {
  std::set<std::string> read;
  for (const auto& [rank, log] : b.logs)
    for (const auto& c : log.checkpoints)
      if (c.op == "restore" && c.phase == "read") read.insert(c.files.begin(), c.files.end());
  std::vector<std::string> out;
  for (const auto& f : torn.files)
    if (read.count(f)) out.push_back(printable(f));
  return out;
}

// Every rank's hello says the same mode: returns whether it is "program" (observed).
std::optional<std::string> mixed_modes(const Outcome& o, bool& observed) {
  std::set<std::string> modes;
  for (const auto& [rank, log] : o.logs)
    if (log.hello) modes.insert(log.hello->checkpoints);
  observed = modes.count(std::string("program")) > 0;  // a set of strings, not JSON
  if (modes.size() > 1)
    return std::string("the ranks disagree on who saves: some create the Pilot with observe=True, some without");
  return std::nullopt;
}

// Each step returns the pilot's exit code when the pilot ends there, nothing otherwise.
using Step = std::optional<ExitCode>;

// Under `anchor reproduce`: program.command[0] ("python3") must resolve to
// what the run it reproduces started, whose files the reproduction's re-pin
// checked; PATH may now find another interpreter. Throws Error
// (kVerification) unless the reproduction allows drift.
void check_same_interpreter(const Pilot& p, const Launch& l) {
  if (!p.opts.baseline || !p.opts.baseline->program) return;
  const auto& was = p.opts.baseline->program->command;
  if (!was || was->empty() || (*was)[0] == l.argv[0]) return;
  const std::string what = "program.command[0] '" + printable(p.cfg.program.command[0]) + "' is " +
                           printable(l.argv[0]) + " here; the run this reproduces started " + printable((*was)[0]);
  if (p.opts.reproduce_allow_drift) {
    ANCHOR_LOG_WARN("reproduce", "{} (--allow-drift: re-run with it)", what);
    return;
  }
  throw Error(ErrorKind::kVerification, what,
              "put the run's interpreter first in PATH (or in program.env's PATH), or pass --allow-drift to re-run "
              "with this one");
}

Step prepare(Run& r) {
  Pilot& p = r.p;
  try {
    r.l = resolve_launch(p);
    check_same_interpreter(p, r.l);
    std::filesystem::create_directories(r.l.dir);
  } catch (const Error& e) {
    return fail(p, "program", exit_code_for(e.kind()), with_hint(e));
  }
  if (p.opts.nodes) {  // several nodes: every node must see the run directory and the checkpoints
    try {
      p.opts.nodes->share_run_dir(p.run_dir, p.ckpt_dir);
    } catch (const Error& e) {
      return fail(p, "nodes", exit_code_for(e.kind()), with_hint(e));
    }
  }
  if (auto why = check_start_dir(p.cfg, p.ckpt_dir); !why.empty()) return fail(p, "start", ExitCode::kUsage, why);
  p.report.set_start({{"from", "init"}});
  r.spec.run_dir = p.run_dir;
  r.spec.checkpoint_dir = p.ckpt_dir;
  r.spec.seed = p.cfg.run.seed;
  r.spec.deterministic = p.cfg.run.deterministic;
  r.spec.stop_at = r.last;
  if (const int to = p.cfg.pilot.resume_world_size; to > 0 && to != p.nproc) r.spec.reshard = {{p.nproc, to}};
  return std::nullopt;
}

// Worker A: K steps, save, R steps, and the save of step K+R, killed inside.
Step reference(Run& r) {
  Pilot& p = r.p;
  r.spec.role = pp::Role::kReference;
  r.spec.save_at = {r.k, r.last};
  r.spec.kill_in_save = r.last;
  r.spec.events = r.l.dir + "/reference.events.jsonl";
  try {
    r.a = run_program_worker(p, r.l, r.spec);
  } catch (const Error& e) {
    return fail(p, "reference", exit_code_for(e.kind()), with_hint(e));
  }
  if (interrupt_signal()) return interrupted_exit(p);
  const Outcome& a = r.a;
  p.report.set_section("program", program_section(p, r.l, a));
  if (auto why = mixed_modes(a, r.observed)) return fail(p, "reference", ExitCode::kRuntime, *why);
  if (r.spec.reshard && !r.observed && a.logs.count(0) && a.logs.at(0).hello)
    return fail(p, "reference", ExitCode::kUsage,
                "pilot.resume_world_size is " + std::to_string(r.spec.reshard->second) +
                    ", but the program saves through anchor_pilot's own checkpoints, which keep each rank's RNG and "
                    "data cursor in a file of its own (a sharded model's state goes through DCP) and restore only at "
                    "the world size that wrote them. Resume at another world size with your "
                    "own DCP save and load, observed (Pilot(observe=True); docs/program.md, \"Resuming at another "
                    "world size\"), or leave pilot.resume_world_size at 0");
  if (!a.killed_by_us) {
    const std::string why =
        !a.error.empty() ? a.error
                         : worker_name(pp::Role::kReference) + " exited with status " + std::to_string(a.status) +
                               " before its kill window (the save of step " + std::to_string(r.last) + "): " +
                               (r.observed ? "does the loop wrap its save in `with pilot.saving(step):` whenever "
                                             "pilot.should_save(step), up to pilot.stop_at?"
                                           : "does the loop call Pilot.maybe_save(step) every step, up to "
                                             "pilot.stop_at?");
    return fail(p, "reference", ExitCode::kRuntime, why);
  }
  if (a.status != 128 + SIGKILL)
    return fail(
        p, "reference", ExitCode::kRuntime,
        !a.error.empty() ? a.error : "worker A ended with status " + std::to_string(a.status) + ", not by SIGKILL");
  for (int rank = 0; rank < p.nproc; ++rank)
    if (!a.logs.count(rank) || !a.logs.at(rank).hello)
      return fail(p, "reference", ExitCode::kRuntime,
                  "worker A rank " + std::to_string(rank) + " never said hello (is it using anchor_pilot?)");
  const auto& ref = a.logs.at(0);
  json fig = {{"steps", ref.steps.size()}, {"ranks", p.nproc}};
  if (!ref.steps.empty() && ref.steps.back().loss.known) fig["loss"] = ref.steps.back().loss.value;
  p.report.add_stage(worker_stage("reference", a, fig));
  if (const auto* s = ref.checkpoint("save", "end", r.k); s && s->bytes && s->seconds) {
    json figures = {{"step", r.k}, {"bytes", *s->bytes}, {"seconds", *s->seconds}};
    if (auto mem = stage_peaks_json(a, "checkpoint_save")) figures["memory"] = std::move(*mem);
    p.report.add_stage(
        {{"stage", "checkpoint_save"}, {"status", "passed"}, {"seconds", *s->seconds}, {"figures", figures}});
  }
  return std::nullopt;
}

// manifest.json: data, the program's sources and Python, the libraries worker A had loaded.
json pin_program_run(const Run& r) {
  const Pilot& p = r.p;
  const auto& log = r.a.logs.at(0);
  manifest::PinOptions po;
  po.use_cache = p.opts.use_hash_cache;
  po.progress = false;
  po.world_size = p.nproc;
  // The versions below come from the program's hello; the devices from here.
  manifest::ProcessFacts facts;
  facts.runtime = manifest::runtime_versions();
  facts.device = manifest::device_info(p.cfg.device);
  facts.libraries = r.a.libraries;
  facts.executable = r.a.executable.empty() ? proc::self_exe() : r.a.executable;
  facts.source = "program";
  po.process = [&] { return facts; };
  json m = manifest::pin(p.cfg, po);
  const auto& h = *log.hello;
  auto& deps = m["dependencies"];
  deps["libtorch"] = h.versions.torch;  // the torch the program ran, as it said
  deps["cuda_runtime"] = h.versions.cuda.empty() ? "none" : h.versions.cuda;
  deps["cudnn"] = h.versions.cudnn.empty() ? "none" : h.versions.cudnn;
  deps["nccl"] = h.versions.nccl.empty() ? "none" : h.versions.nccl;
  if (!log.program)
    throw Error(ErrorKind::kRuntime, "worker A sent no program line before its kill window",
                "use the anchor_pilot that ships with this anchor");
  const auto& pl = *log.program;
  manifest::ProgramPins pins;
  pins.command = r.l.argv;
  pins.cwd = r.l.cwd;
  pins.root = pl.root;
  pins.sources = pl.sources;
  pins.executable = pl.executable;
  pins.sys_path = pl.sys_path;
  for (const auto& d : pl.distributions) pins.distributions.push_back({d.name, d.version, d.dist_info});
  pins.distributions_error = pl.distributions_error;
  pins.python = h.versions.python;
  pins.anchor_pilot = h.anchor_pilot;
  m["program"] = manifest::pin_program(pins, po);
  json ranks = json::array();  // the seed each rank's torch generator had at its first step
  for (const auto& [rank, rank_log] : r.a.logs) {
    const auto& steps = rank_log.steps;
    ranks.push_back({{"rank", rank},
                     {"torch", !steps.empty() && steps.front().torch_seed ? json(*steps.front().torch_seed) : json()}});
  }
  m["seeds"] = manifest::program_seeds(p.cfg.run.seed, ranks);
  return m;
}

// A finished save that wrote a DCP checkpoint: its `.metadata` and shards must hold together (as
// `anchor checkpoint verify` checks them); the result goes beside the save's digests. A save the
// program reported finished whose DCP checkpoint does not fails the pilot.
void check_dcp(const std::string& ckpt_dir, std::int64_t step, const std::vector<std::string>& files, json& save) {
  const auto found = observed::dcp_in_save(ckpt_dir, files);
  if (found.empty()) return;
  json list = json::array();
  for (const auto& v : found) {
    list.push_back(v.to_json());
    if (!v.ok)
      throw Error(ErrorKind::kVerification,
                  "your save of step " + std::to_string(step) + " finished, but its DCP checkpoint " +
                      printable(v.dir) + " does not hold together: " + v.problems.front() +
                      (v.problems.size() > 1 ? " (and " + std::to_string(v.problems.size() - 1) + " more)" : ""),
                  "the save returned before its files were whole: wait for dcp.async_save's future, or save "
                  "with dcp.save (docs/program.md, \"FSDP with DCP\")");
  }
  save["dcp"] = list;
}

Step pin(Run& r) {
  Pilot& p = r.p;
  try {
    p.stage("pin", [&] {
      json m = pin_program_run(r);
      fs::atomic_write_file(p.run_dir + "/manifest.json", dump_json(m, 2));
      p.report.set_manifest(m);
      return json{{"sources", m["program"]["sources"].size()},
                  {"distributions", m["program"]["python"]["distributions"].size()},
                  {"shared_libraries", m["dependencies"]["shared_libraries"].size()}};
    });
  } catch (const Error& e) {
    return fail(p, "pin", exit_code_for(e.kind()), with_hint(e));
  }
  if (!r.observed) {
    p.stage("kill", [&] {
      return json{{"signal", "SIGKILL"}, {"exit_status", r.a.status}, {"torn_checkpoints", torn_temps(p.ckpt_dir)}};
    });
    return std::nullopt;
  }
  // Observed: what the kill left of the program's save of K+R, and the finished saves pinned by digest.
  try {
    p.stage("kill", [&] {
      const auto saved = finished_files(r.a, r.k);
      r.torn = observed::torn_save(p.ckpt_dir, finished_files(r.a), {saved.begin(), saved.end()}, r.k, r.last);
      json saves = json::array();
      std::set<std::int64_t> steps;
      for (const auto& c : r.a.logs.at(0).checkpoints)
        if (c.op == "save" && c.phase == "end" && c.step && steps.insert(*c.step).second) {
          const auto files = finished_files(r.a, *c.step);
          r.saves.push_back(observed::hashed_save(p.ckpt_dir, *c.step, {files.begin(), files.end()}));
          saves.push_back(r.saves.back().to_json());
          check_dcp(p.ckpt_dir, *c.step, {files.begin(), files.end()}, saves.back());
        }
      p.report.set_section("program_checkpoints", {{"dir", printable(p.ckpt_dir)},
                                                   {"kind", "the program's own (observed)"},
                                                   {"saves", saves},
                                                   {"torn", r.torn.to_json()}});
      json torn = json::array();
      if (!r.torn.empty()) torn.push_back(r.torn.summary());
      return json{{"signal", "SIGKILL"},
                  {"exit_status", r.a.status},
                  {"point", printable(r.a.logs.at(0).checkpoint("save", "kill_window", r.last)
                                          ? r.a.logs.at(0).checkpoint("save", "kill_window", r.last)->point
                                          : "")},
                  {"torn_checkpoints", torn},
                  {"torn_save", r.torn.to_json()}};
    });
  } catch (const Error& e) {
    return fail(p, "kill", exit_code_for(e.kind()), with_hint(e));
  }
  return std::nullopt;
}

// Whether worker B ended on the helper's RestoreError (a state that differs after loading) and
// reported restored digests that differ from the reference's save of K.
bool restored_state_differs(const Run& r) {
  bool restore_error = false;
  for (const auto& [rank, res] : r.b.logs)
    for (const auto& e : res.errors) restore_error = restore_error || e.kind == "RestoreError";
  if (!restore_error) return false;
  for (const auto& [rank, res] : r.b.logs) {
    const auto* got = res.digests_at("restore", r.k);
    const auto ref = r.a.logs.find(rank);
    const auto* want = ref == r.a.logs.end() ? nullptr : ref->second.digests_at("save", r.k);
    if (!got || !want) continue;
    for (const auto& [name, digest] : want->components)
      if (const auto* g = got->find(name); g && *g != digest) return true;
  }
  return false;
}

// Ranks that start with the same random stream and draw from it (seed document 003): each rank's
// dropout masks, and every other draw, are then the same on every rank. Worker A's first two step
// lines carry each stream's digest per rank: a stream whose digest changed between them is drawn
// from; ranks with the same digest at the first share it. pilot.shared_rng: fail (exit 3) or warn.
Step ranks_rng(Run& r) {
  Pilot& p = r.p;
  if (p.nproc < 2) return std::nullopt;
  std::map<std::string, std::map<std::string, std::vector<int>>> by_digest;  // stream -> digest -> ranks
  std::set<std::string> drawn;
  for (const auto& [rank, log] : r.a.logs) {
    if (log.steps.size() < 2) continue;
    const auto& next = log.steps[1].rng_streams;
    for (const auto& [name, d] : log.steps[0].rng_streams) {
      by_digest[name][d].push_back(rank);
      for (const auto& [n2, d2] : next)
        if (n2 == name && d2 != d) drawn.insert(name);
    }
  }
  if (by_digest.empty()) return std::nullopt;  // the program's steps carry no stream digests
  json streams = json::object();
  std::string shared_words;
  for (const auto& [name, groups] : by_digest) {
    json shared = json::array();
    for (const auto& [d, ranks] : groups)
      if (ranks.size() > 1) shared.push_back(ranks);
    streams[name] = {{"drawn", drawn.count(name) > 0}, {"shared_by", shared}};
    if (shared.empty() || !drawn.count(name)) continue;
    std::string ranks;
    for (const auto& rk : shared.front()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rk.get<int>());
    shared_words += (shared_words.empty() ? "" : "; ") + pp::component_words("rng." + name) + " (ranks " + ranks + ")";
  }
  p.report.set_section("ranks_rng", {{"streams", streams}, {"shared", !shared_words.empty()}});
  if (shared_words.empty()) {
    p.stage("ranks_rng", [&] { return json{{"streams", streams.size()}, {"shared", "none"}}; });
    return std::nullopt;
  }
  const std::string what =
      "your ranks start their first step with the same random stream and draw from it: " + shared_words +
      ". Every rank then draws the same numbers (the same dropout masks on every rank, seed "
      "document 003)";
  const std::string fix =
      "seed each rank on its own once the model is built (after DDP's broadcast), e.g. "
      "torch.manual_seed(seed + rank), random.seed(seed + rank), numpy.random.seed(seed + rank); "
      "or set pilot.shared_rng: warn";
  if (p.cfg.pilot.shared_rng == "warn") {
    ANCHOR_LOG_WARN("pilot", "{} ({})", what, fix);
    p.stage("ranks_rng", [&] {
      return json{{"streams", streams.size()}, {"shared", shared_words}, {"warning", what}};
    });
    return std::nullopt;
  }
  return fail(p, "ranks_rng", ExitCode::kVerification, what + " (hint: " + fix + ")");
}

// The memory probe's points (plan::probe_shapes at the program's declared shape), one
// spec each: role probe, two steps, no saves, its own events file.
std::vector<pp::Spec> probe_specs(const Run& r, const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes) {
  std::vector<pp::Spec> specs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string tag = "probe-" + std::to_string(i + 1);
    pp::Spec spec = r.spec;
    spec.role = pp::Role::kProbe;
    spec.probe = shapes[i];
    spec.save_at.clear();
    spec.kill_in_save.reset();
    spec.restore.reset();
    spec.profile_step.reset();
    spec.probe_more.clear();
    spec.reshard.reset();
    spec.stop_at = 2;
    spec.checkpoint_dir = r.l.dir + "/" + tag + ".checkpoints";  // never written: a probe saves nothing
    spec.events = r.l.dir + "/" + tag + ".events.jsonl";
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The points the program's probe shapes give, when it can be probed (it declared its shape with
// probe=True and reported a step's memory); none otherwise.
std::vector<std::pair<std::int64_t, std::int64_t>> probe_shapes_of(const Run& r) {
  const auto& ref = r.a.logs.at(0);
  if (!ref.hello || !ref.hello->shape || !ref.hello->shape->probe || !ref.step_memory) return {};
  return plan::probe_shapes(ref.hello->shape->micro_batch, ref.hello->shape->seq_len,
                            r.p.cfg.pilot.memory_probe_micro_batch);
}

// Writes the spec of each point from `first` on and lists them in `forker`'s probe_more: the
// process that forks them at anchor_pilot.shape().
void tell_forked(const Run& r, const std::vector<pp::Spec>& specs, pp::Spec& forker, std::size_t first) {
  for (std::size_t i = first; i < specs.size(); ++i) {
    const std::string file = "probe-" + std::to_string(i + 1) + ".spec.json";
    fs::atomic_write_file(r.l.dir + "/" + file, dump_json(pp::to_json(specs[i]), 2) + "\n");
    std::error_code ec;
    std::filesystem::remove(specs[i].events, ec);  // a reused run directory's
    forker.probe_more.push_back({specs[i].probe->first, specs[i].probe->second, file});
  }
}

// One rank: worker B forks the memory probe's points at anchor_pilot.shape(), before its own
// model exists, so that they cost no process start (read after the verdict, in memory_probe).
void fork_probes_in_b(Run& r) {
  r.spec.probe_more.clear();
  if (r.p.nproc != 1 || r.p.opts.nodes || r.spec.reshard) return;
  r.probes = probe_specs(r, probe_shapes_of(r));
  r.probes_in_b = !r.probes.empty();
  if (r.probes_in_b) tell_forked(r, r.probes, r.spec, 0);
}

// The program's evaluate() around the restore (Pilot(evaluate=...)): in worker
// A's save of K and right after worker B restored it. Its stage, its peak
// memory, and the report's eval section; the verdict compares the two losses.
void add_eval_stage(Run& r) {
  const auto find = [&](const pp::WorkerLog& log, const char* when) -> const pp::EvalLine* {
    for (const auto& e : log.evals)
      if (e.when == when && e.step == r.k) return &e;
    return nullptr;
  };
  const auto* before = find(r.a.logs.at(0), "before_save");
  const auto* after = find(r.b.logs.at(0), "after_restore");
  if (!before && !after) return;
  json eval = {{"before_save", before && before->loss.known ? json(before->loss.value) : json()},
               {"after_restore", after && after->loss.known ? json(after->loss.value) : json()},
               {"step", r.k},
               {"source", "the program's evaluate() (Pilot(evaluate=...)), run by the helper"}};
  if (before && before->loss.known && std::isfinite(before->loss.value) && before->loss.value < 50)
    eval["perplexity"] = std::exp(before->loss.value);
  r.p.report.set_section("eval", eval);
  if (!after) return;
  json fig = {{"step", r.k}};
  if (after->loss.known) fig["loss"] = after->loss.value;
  if (auto mem = stage_peaks_json(r.b, "eval_after_restore")) fig["memory"] = std::move(*mem);
  json stage = {{"stage", "eval_after_restore"}, {"status", "passed"}, {"figures", fig}};
  if (after->seconds) stage["seconds"] = *after->seconds;
  r.p.report.add_stage(stage);
}

// resume's figures.profile: the profiled step's line and, from rank 0's trace
// (<run>/profile.json), its operators and kernels with the most self time.
json profile_figure(const Pilot& p, const pp::ProfileLine& line, const pp::WorkerLog& ref) {
  run_report::Profile prof;
  prof.step = line.step, prof.seconds = line.seconds, prof.events = line.events;
  if (!line.profiler.empty()) prof.profiler = line.profiler;
  if (ref.hello && ref.hello->shape) prof.micro_batch = ref.hello->shape->micro_batch;
  if (ref.hello && ref.hello->shape) prof.seq_len = ref.hello->shape->seq_len;
  if (!line.error.empty()) prof.error = line.error;
  if (line.file == "profile.json") {
    prof.file = line.file;
    add_top_operators(p.run_dir, prof);
  } else if (!line.file.empty()) {
    prof.error = "the profile line names " + printable(line.file) + ", not profile.json";
  }
  json j = run_report::section_to_json(prof);
  if (line.comm_s) j["comm_s"] = *line.comm_s;
  return j;
}

// Worker B: fresh processes restore the newest checkpoint that verifies and train to K+R.
Step resume(Run& r) {
  Pilot& p = r.p;
  r.spec.role = pp::Role::kResume;
  r.spec.save_at = {r.last};
  r.spec.kill_in_save.reset();
  r.spec.events = r.l.dir + "/resume.events.jsonl";
  r.spec.profile_step = r.last;  // its last step, under torch.profiler: <run>/profile.json
  fork_probes_in_b(r);
  try {
    r.b = run_program_worker(p, r.l, r.spec);
  } catch (const Error& e) {
    return fail(p, "resume", exit_code_for(e.kind()), with_hint(e));
  }
  if (interrupt_signal()) return interrupted_exit(p);
  bool b_observed = false;
  if (auto why = mixed_modes(r.b, b_observed)) return fail(p, "resume", ExitCode::kRuntime, *why);
  const bool b_said_hello = std::any_of(r.b.logs.begin(), r.b.logs.end(), [](const auto& l) { return l.second.hello; });
  if (b_said_hello && b_observed != r.observed)
    return fail(p, "resume", ExitCode::kRuntime,
                std::string("worker B ") +
                    (b_observed ? "observes the program's own save and load (observe=True)"
                                : "saves and restores through the helper") +
                    ", worker A did not: the same program must run both ways");
  // Observed: a resume that failed after anchor tore a save is told what the torn save holds and lacks.
  // When its error names a file of that save, the resume took it: the resume's defect (exit 3).
  // So does a load that opened one of its files (the helper watches what worker B opens there).
  if (r.b.status != 0 && r.observed && !r.torn.empty()) {
    const auto read = torn_files_read(r.b, r.torn);
    const bool took_it = !read.empty() || r.torn.named_in(r.b.error);
    std::string read_words;
    for (const auto& f : read) read_words += (read_words.empty() ? "" : ", ") + f;
    return fail(p, "resume", took_it ? ExitCode::kVerification : ExitCode::kRuntime,
                r.b.error + ". anchor killed your save of step " + std::to_string(r.last) +
                    " inside: " + r.torn.words(r.k) +
                    (!read.empty() ? ". Your resume read " + read_words + " from that save"
                     : took_it     ? ". Your resume loaded that save"
                                   : ". If your resume chose it") +
                    ": make it pass over a save that did not finish (write a marker file last and look for it, or "
                    "save into a temporary directory and rename it into place)");
  }
  // The helper raises when a component's state after load_state_dict differs from its file (check_restore),
  // having reported what it restored: that is the verdict's to name (exit 3), not a runtime failure.
  if (r.b.status != 0 && !restored_state_differs(r)) return fail(p, "resume", ExitCode::kRuntime, r.b.error);
  const int b_world = world_of(p, r.spec);
  for (int rank = 0; rank < b_world; ++rank)
    if (!r.b.logs.count(rank))
      return fail(p, "resume", ExitCode::kRuntime, "worker B rank " + std::to_string(rank) + " reported nothing");
  const auto& res = r.b.logs.at(0);
  // Ended without restoring and without a step: not a resume that diverged, a program that stopped early.
  const bool restored = std::any_of(res.checkpoints.begin(), res.checkpoints.end(),
                                    [](const pp::CheckpointLine& c) { return c.op == "restore" && c.phase == "end"; });
  if (r.b.status == 0 && !restored && res.steps.empty())
    return fail(p, "resume", ExitCode::kRuntime,
                "worker B ended (status 0) before it restored a checkpoint or ran a step: " +
                    std::string(r.observed ? "does the program call pilot.restored(step) after its own load, and "
                                             "train up to pilot.stop_at?"
                                           : "does the program call Pilot.restore() and train up to pilot.stop_at?"));
  if (const auto* c = res.checkpoint("restore", "end", r.k); r.observed && c) {
    // The program's own load: its time when it gave one (restored(step, seconds=...)), the bytes of the save of K.
    json fig = {{"step", r.k}};
    json stage = {{"stage", "restore"}, {"status", "passed"}};
    if (c->seconds) stage["seconds"] = fig["seconds"] = *c->seconds;
    if (const auto* s = r.a.logs.at(0).checkpoint("save", "end", r.k); s && s->bytes) fig["bytes"] = *s->bytes;
    if (auto mem = stage_peaks_json(r.b, "restore")) fig["memory"] = std::move(*mem);
    stage["figures"] = fig;
    p.report.add_stage(stage);
  } else if (c && c->bytes && c->seconds) {
    json fig = {{"step", r.k}, {"bytes", *c->bytes}, {"seconds", *c->seconds}};
    if (auto mem = stage_peaks_json(r.b, "restore")) fig["memory"] = std::move(*mem);
    p.report.add_stage({{"stage", "restore"}, {"status", "passed"}, {"seconds", *c->seconds}, {"figures", fig}});
  }
  add_eval_stage(r);
  json fig = {{"steps", res.steps.size()}, {"ranks", b_world}};
  if (!res.steps.empty() && res.steps.back().loss.known) fig["loss"] = res.steps.back().loss.value;
  if (res.profile) fig["profile"] = profile_figure(p, *res.profile, r.a.logs.at(0));
  json stage = worker_stage("resume", r.b, fig);
  if (r.b.status != 0) stage.update({{"status", "failed"}, {"error", r.b.error}});
  p.report.add_stage(stage);
  return std::nullopt;
}

// Per rank: bitwise on CPU, within pilot.tolerance elsewhere; rank 0's verdict with every other rank's failures.
void compare(Run& r) {
  Pilot& p = r.p;
  p.stage("compare", [&] {
    // The program picks its device: bitwise unless pilot.tolerance says otherwise.
    const double tol = p.cfg.pilot.tolerance;
    std::vector<protocol::Verdict> ranks;
    ranks.reserve(static_cast<std::size_t>(std::max(p.nproc, 0)));
    // Observed: the program may save more often than anchor asks; its load may resume a later finished save.
    r.from = r.k;
    std::int64_t& from = r.from;
    if (const std::int64_t got = observed_restore(r.b);
        r.observed && got > r.k && got < r.last && r.a.logs.at(0).digests_at("save", got))
      from = got;
    if (r.spec.reshard)  // another world size: rank 0's full-state fingerprints, one verdict
      ranks.push_back(pp::compare_resharded(r.a.logs.at(0), r.b.logs.at(0), from, r.last, r.spec.reshard->first,
                                            r.spec.reshard->second));
    else
      for (int rank = 0; rank < p.nproc; ++rank)
        ranks.push_back(pp::compare(r.a.logs.at(rank), r.b.logs.at(rank), from, r.last, tol, r.observed));
    // Observed: a load that took the save anchor tore is told what that save lacks.
    if (r.observed && observed_restore(r.b) == r.last)
      for (auto& c : ranks[0].checks)
        if (c.name == "restored step" && !c.ok)
          c.detail = "your load restored step " + std::to_string(r.last) +
                     " from the save anchor killed inside: " + r.torn.words(r.k) +
                     "; a resume must pass over a save that did not finish (write a marker file last and look for "
                     "it, or save into a temporary directory and rename it into place)";
    r.verdict.emplace(std::move(ranks));
    return compare_stage_figures(*r.verdict, r.spec.reshard ? static_cast<int>(r.spec.reshard->second) : p.nproc);
  });
  p.report.set_section("resume", r.verdict->to_json());
  p.report.set_section("steps", {{"train", steps_json(r.a.logs.at(0))},
                                 {"resumed", steps_json(r.b.logs.at(0))},
                                 {"numbered_from", run_report::kStepsNumberedFrom}});
  if (!r.observed) p.report.add_checkpoints(p.ckpt_dir, p.run_dir);  // observed: program_checkpoints, at the kill
}

// Helper checkpoints: what the workers printed at their saves against what the committed steps pin
// (protocol/saved_vs_reported.hpp). Worker A's save of K and worker B's save of K+R; a save line
// whose step does not verify, or a digest that is not its file's, fails the pilot (exit 3).
Step cross_check(Run& r) {
  Pilot& p = r.p;
  std::vector<protocol::SaveCrossCheck> checks;
  std::vector<std::string> problems;
  const auto check = [&](const std::string& worker, const Outcome& o, std::int64_t step) {
    std::map<int, const pp::WorkerLog*> ranks;
    for (const auto& [rank, log] : o.logs) ranks[rank] = &log;
    if (ranks.empty() || !ranks.begin()->second->digests_at("save", step)) return;
    const std::string dir = p.ckpt_dir + "/" + checkpoint::step_dir_name(step);
    const std::string rel = printable(std::filesystem::relative(dir, p.run_dir).string());
    const auto pinned = checkpoint::Store(p.ckpt_dir).pinned(dir);
    if (!pinned.v.ok) {
      problems.push_back(worker + " printed its save of step " + std::to_string(step) + ", but " + rel +
                         " is not a committed checkpoint that verifies (" +
                         (pinned.v.problems.empty() ? pinned.v.state : pinned.v.problems.front()) + ")");
      return;
    }
    try {
      checks.push_back(protocol::cross_check_save(
          worker, protocol::PinnedStep::from_json(step, rel, pinned.state, pinned.manifest), ranks));
    } catch (const Error& e) {
      problems.push_back(e.what());
      return;
    }
    for (const auto& c : checks.back().contradictions) problems.push_back(c.words());
  };
  check("worker A", r.a, r.k);
  check("worker B", r.b, r.last);
  json list = json::array();
  int compared = 0;
  for (const auto& c : checks) {
    list.push_back(c.to_json());
    compared += c.compared;
  }
  json listed = json::array();  // at most 20, each cut to a sentence's length
  for (std::size_t i = 0; i < problems.size() && i < 20; ++i) listed.push_back(capped(printable(problems[i])));
  p.report.set_section("cross_check", {{"saves", list}, {"problems", listed}, {"problem_count", problems.size()}});
  if (!problems.empty())
    return fail(p, "cross_check", ExitCode::kVerification,
                "what your program printed contradicts the checkpoint it committed: " + capped(problems.front()) +
                    (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "") +
                    ". The verdict rests on those lines: print them from the state the program saves and "
                    "restores (Pilot.step, Pilot.save, Pilot.restore), never from another run");
  p.stage("cross_check", [&] { return json{{"saves", checks.size()}, {"components", compared}}; });
  return std::nullopt;
}

// The determinism control's checkpoint directory, made for it: worker B's own save of K+R stays
// where it is, and the control restores the save worker B restored. Helper checkpoints: named in the
// spec. Observed: a copy of that save, each file checked against its pin (the program's load then
// finds it as worker B found it). Returns "" or why the control cannot run.
std::string control_checkpoints(Run& r, pp::Spec& spec) {
  const std::string dir = r.l.dir + "/control.checkpoints";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // a reused run directory's
  std::filesystem::create_directories(dir, ec);
  if (ec) return "cannot make " + printable(dir) + ": " + ec.message();
  spec.checkpoint_dir = dir;
  if (!r.observed) {
    spec.restore = r.p.ckpt_dir + "/" + checkpoint::step_dir_name(r.from);
    return "";
  }
  const auto it =
      std::find_if(r.saves.begin(), r.saves.end(), [&](const observed::HashedSave& s) { return s.step == r.from; });
  if (it == r.saves.end()) return "anchor pinned no save of step " + std::to_string(r.from);
  try {
    const std::string why = observed::copy_pinned_save(r.p.ckpt_dir, *it, dir);
    return why.empty() ? "" : "your save of step " + std::to_string(r.from) + " is not as it was pinned: " + why;
  } catch (const Error& e) {
    return with_hint(e);
  }
}

// Why worker B's run cannot be repeated ("" when it can): it must have restored and run its steps.
std::string control_refused(const Run& r) {
  if (r.b.status != 0) return "worker B did not finish its steps";
  if (!r.verdict->combined.checks.empty() && r.verdict->combined.checks.front().name == "restored step" &&
      !r.verdict->combined.checks.front().ok)
    return "worker B did not restore the save of step " + std::to_string(r.from);
  return "";
}

// The determinism control (pilot.determinism): worker B's steps run a second time, in fresh
// processes, from the save it restored. Two runs of the same steps from the same state that agree
// bitwise make a mismatch the resume's; two that differ make the program nondeterministic, with the
// pilot.tolerance its run-to-run difference asks for. auto: only when the resume does not match.
Step determinism(Run& r) {
  Pilot& p = r.p;
  const std::string& mode = p.cfg.pilot.determinism;
  if (mode == "off" || (mode == "auto" && r.verdict->match())) return std::nullopt;
  json section = {{"mode", mode}, {"ran", false}};
  const auto not_run = [&](const std::string& why) {
    section["why"] = why;
    p.report.set_section("determinism", section);
    p.stage("determinism", [&] { return json{{"ran", false}, {"why", why}}; });
    return std::nullopt;
  };
  if (const std::string why = control_refused(r); !why.empty()) return not_run(why);
  pp::Spec spec = r.spec;
  spec.events = r.l.dir + "/control.events.jsonl";
  spec.profile_step.reset();  // worker B's profile.json is the run's
  spec.probe_more.clear();
  if (const std::string why = control_checkpoints(r, spec); !why.empty()) return not_run(why);
  Outcome c;
  try {
    c = run_program_worker(p, r.l, spec, "control");
  } catch (const Error& e) {
    return not_run(with_hint(e));
  }
  if (interrupt_signal()) return interrupted_exit(p);
  if (c.status != 0) return not_run("the control's run failed: " + c.error);
  pp::RunDifference control, resume;
  for (int rank = 0; rank < world_of(p, spec); ++rank) {
    if (!c.logs.count(rank)) return not_run("the control's rank " + std::to_string(rank) + " reported nothing");
    control.add(r.b.logs.at(rank), c.logs.at(rank), r.from, r.last, rank);
    if (!spec.reshard) resume.add(r.a.logs.at(rank), r.b.logs.at(rank), r.from, r.last, rank);
  }
  r.control = pp::judge_determinism(control, resume, r.from, r.last);
  const json max_relative = std::isfinite(control.max_relative) ? json(control.max_relative) : json("inf");
  section = r.control->to_json();
  section.update(
      {{"mode", mode}, {"ran", true}, {"seconds", c.seconds}, {"words", r.control->words(r.verdict->match())}});
  p.report.set_section("determinism", section);
  p.report.add_stage(
      {{"stage", "determinism"},
       {"status", "passed"},
       {"seconds", c.seconds},
       {"figures", {{"finding", r.control->finding_name()}, {"max_relative", max_relative}, {"seconds", c.seconds}}}});
  return std::nullopt;
}

// The report's measurements as far as the pilot got, and a plan section that
// says why there is no plan.
void not_planned(Run& r, const std::string& why) {
  r.p.report.set_section("measurements", measurements(r.p, r.a, r.b, r.k, r.probe_points));
  r.p.report.set_section("plan", {{"status", "not planned"}, {"why", why}});
}

// A memory probe point the first point's process forked (spec probe_more): its
// events file, whole, once that process has ended (its children with it). False
// when the helper did not fork it (nothing there): it then runs on its own.
bool read_forked_point(Pilot& p, const pp::Spec& spec, const std::string& tag, Outcome& o) {
  std::error_code ec;
  if (!std::filesystem::exists(spec.events, ec)) return false;
  pp::EventReader reader(spec.events, max_lines_per_rank(spec.stop_at), max_bytes_per_rank(spec.stop_at));
  const auto events = reader.poll();
  if (events.empty()) return false;
  o = Outcome{};
  o.status = 0;
  for (const auto& e : events) {
    if (e.rank != 0)
      throw Error(
          ErrorKind::kRuntime,
          printable(spec.events) + ": a line of rank " + std::to_string(e.rank) + " from a probe point of one rank",
          "the program must not set RANK itself; anchor sets it (docs/program.md, \"The contract\")");
    if (e.type != "program") p.events->write(e.raw, "program-" + tag);
    o.logs[0].add(e);
    if (const auto* err = std::get_if<pp::ErrorLine>(&e.body); err && o.error.empty())
      o.status = 1, o.error = err->message;
  }
  const auto& forked = o.logs[0].forked;
  if (forked && forked->status != 0 && o.status == 0)
    o.status = 1, o.error = "it ended with status " + std::to_string(forked->status);
  // From the fork to its exit, as its parent timed it; else (a parent killed first) its lines' span.
  o.seconds = forked ? forked->seconds : std::max(0.0, events.back().time - events.front().time);
  return true;
}

// The memory probe: when the program said it runs at the shape
// anchor_pilot.shape() returns, fresh processes run two steps each at a
// smaller micro-batch and a shorter sequence (as the built-in probe does),
// saving nothing; each reports its second step's peak. Otherwise the plan
// rests on the reference's one point.
Step memory_probe(Run& r) {
  Pilot& p = r.p;
  const auto& h = *r.a.logs.at(0).hello;
  const auto shapes = probe_shapes_of(r);
  if (shapes.empty()) return std::nullopt;  // not probed, or micro-batch 1 and a short sequence: one point
  const auto t0 = Clock::now();
  json figures = json::array();
  std::vector<pp::Spec> specs = r.probes_in_b ? r.probes : probe_specs(r, shapes);
  // Not forked by worker B, one rank: the first point's process forks the others at
  // anchor_pilot.shape() (spec probe_more).
  const bool fork = !r.probes_in_b && p.nproc == 1 && !p.opts.nodes && specs.size() > 1;
  if (fork) tell_forked(r, specs, specs[0], 1);
  double inside_b = 0;  // the points worker B forked: their time was spent inside its stage
  bool any_in_b = false;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto [pmb, pT] = shapes[i];
    const std::string tag = "probe-" + std::to_string(i + 1);
    const pp::Spec& spec = specs[i];
    Outcome o;
    auto failed = [&](ExitCode code, const std::string& why) {
      not_planned(r, "the memory probe failed: " + why);
      return fail(p, "memory_probe", code, why);
    };
    bool forked = false;
    try {
      if ((i > 0 && fork) || r.probes_in_b) forked = read_forked_point(p, spec, tag, o);
      if (!forked) o = run_program_worker(p, r.l, spec, tag);  // not forked (CUDA initialized): on its own
      if (forked && r.probes_in_b) inside_b += o.seconds, any_in_b = true;
    } catch (const Error& e) {
      return failed(exit_code_for(e.kind()), with_hint(e));
    }
    if (interrupt_signal()) {
      not_planned(r, "interrupted in the memory probe");
      return interrupted_exit(p);
    }
    const std::string at = "(micro_batch " + std::to_string(pmb) + ", seq_len " + std::to_string(pT) + ")";
    const std::string hint =
        "; the program declared probe=True in anchor_pilot.shape(): it must build its model "
        "and data with the shape it returns, or pass probe=False";
    if (o.status != 0) return failed(ExitCode::kRuntime, "the memory probe at " + at + ": " + o.error + hint);
    const auto [rank, sm] = highest_step_memory(o);
    if (!sm)
      return failed(ExitCode::kRuntime, "the memory probe at " + at +
                                            " reported no step_memory line with a peak (it must run 2 "
                                            "steps, calling Pilot.step each)" +
                                            hint);
    // Sizes are below 2^31 each (the hello's check): their product is exact in a long double.
    const long double expected = static_cast<long double>(pmb) * pT * h.shape->grad_accum;
    for (const auto& [k, log] : o.logs)
      for (const auto& st : log.steps)
        if (st.tokens && static_cast<long double>(*st.tokens) != expected)
          return failed(ExitCode::kRuntime, "the memory probe at " + at + " reported " + std::to_string(*st.tokens) +
                                                " tokens at step " + std::to_string(st.step) +
                                                (o.logs.size() > 1 ? " on rank " + std::to_string(k) : "") + ", not " +
                                                fmt_count(expected) + hint);
    r.probe_points.push_back(memory_point(*sm, rank, pmb, pT, tag));
    figures.push_back({{"micro_batch", pmb},
                       {"seq_len", pT},
                       {"peak_bytes", *sm->peak_bytes},
                       {"rank", rank},
                       {"seconds", o.seconds},
                       {"process", !forked         ? "its own"
                                   : r.probes_in_b ? "forked from worker B's at anchor_pilot.shape()"
                                                   : "forked from probe-1's at anchor_pilot.shape()"}});
  }
  // Its cost: what it took here, and the points worker B forked (their seconds from fork to exit, spent
  // inside worker B's stage).
  json fig = {{"points", figures}};
  if (any_in_b) fig["inside_resume_s"] = inside_b;
  p.report.add_stage({{"stage", "memory_probe"},
                      {"status", "passed"},
                      {"seconds", std::chrono::duration<double>(Clock::now() - t0).count() + inside_b},
                      {"figures", fig}});
  return std::nullopt;
}

// The plan, from the program's measurements as from the built-in's. A program
// that did not declare its shape, or measurements the plan cannot use, leave
// the report saying why it is not planned; the pilot's verdict stands.
Step make_plan(Run& r) {
  Pilot& p = r.p;
  p.report.set_section("measurements", measurements(p, r.a, r.b, r.k, r.probe_points));
  const auto& h = *r.a.logs.at(0).hello;
  std::string why;
  std::optional<plan::Measured> m;
  if (!h.shape) {
    why =
        "the program did not declare its step's shape: call anchor_pilot.shape(micro_batch=..., seq_len=...) "
        "before building its model (docs/program.md, \"The plan\")";
  } else if (!p.catalog_problem.empty()) {
    why = "the device catalog: " + p.catalog_problem;
  } else if (!r.a.logs.at(0).step_memory) {
    why =
        "worker A sent no step_memory line (it reports the peak of the second step: does the program call "
        "Pilot.step every step?)";
  } else {
    try {
      m = run_report::measured_from_report(p.report.typed());
    } catch (const Error& e) {
      why = with_hint(e);
    }
  }
  if (!m) {
    not_planned(r, why);
    ANCHOR_LOG_WARN("plan", "not planned: {}", why);
    return std::nullopt;
  }
  try {
    signal_fault_at_plan();
    p.stage("plan", [&] {
      auto plan = plan::make_plan(*m, p.catalog, p.cfg);
      p.report.set_plan(plan);
      return json{{"recommendation", plan.value("recommendation", json())}, {"memory_points", m->memory_points.size()}};
    });
  } catch (const Error& e) {
    return fail(p, "plan", exit_code_for(e.kind()), with_hint(e));
  }
  return std::nullopt;
}

// One step line of `log` (nullptr when it has none).
const pp::StepLine* step_line(const pp::WorkerLog& log, std::int64_t step) {
  for (const auto& s : log.steps)
    if (s.step == step) return &s;
  return nullptr;
}

// The fp32 side against the low-precision side of one figure (docs/precision.md).
struct PrecisionSide {
  json j;  // {fp32, value, rel_diff, flagged}
  bool finite = false, flagged = false;
  double rel_diff = 0;
};
PrecisionSide precision_figure(const pp::Number& fp32, const pp::Number& low, double tol) {
  PrecisionSide out;
  out.finite = fp32.known && low.known && std::isfinite(fp32.value) && std::isfinite(low.value);
  if (!out.finite) {
    out.j = {{"fp32", fp32.known ? json(fp32.text()) : json()}, {"value", low.known ? json(low.text()) : json()}};
    return out;
  }
  out.rel_diff = std::fabs(low.value - fp32.value) / std::max(std::fabs(fp32.value), 1e-12);
  out.flagged = out.rel_diff > tol;
  out.j = {{"fp32", fp32.value}, {"value", low.value}, {"rel_diff", out.rel_diff}, {"flagged", out.flagged}};
  return out;
}

// The loss scaler as the step lines say it (a GradScaler given to the Pilot): its scale at worker A's
// save and at worker B's end, and the steps it skipped (an inf or NaN gradient), as the built-in's.
void add_loss_scaler(Run& r) {
  const auto& ref = r.a.logs.at(0);
  const auto& res = r.b.logs.at(0);
  const bool enabled = std::any_of(ref.steps.begin(), ref.steps.end(), [](const auto& s) { return s.loss_scale; });
  if (!enabled) return;
  json skipped = json::array();
  for (const auto* log : {&ref, &res})
    for (const auto& s : log->steps)
      if (s.scaler_skipped && (log == &ref ? s.step <= r.last : s.step > r.k))
        skipped.push_back({{"part", log == &ref ? "reference" : "resume"},
                           {"step", s.step},
                           {"loss_scale", s.loss_scale ? json(*s.loss_scale) : json()}});
  const auto* saved = step_line(ref, r.k);
  const auto* last = res.steps.empty() ? nullptr : &res.steps.back();
  r.p.report.set_section("loss_scaler",
                         {{"enabled", true},
                          {"skipped_steps", skipped},
                          {"saved_scale", saved && saved->loss_scale ? json(*saved->loss_scale) : json()},
                          {"final_scale", last && last->loss_scale ? json(*last->loss_scale) : json()},
                          {"source", "the GradScaler given to the Pilot: its scale after each step's update()"}});
}

// Issue 45, item 4: a program that declared a bf16 or fp16 step (anchor_pilot.shape(precision=...)) and
// ran its forward in Pilot.autocast(): one more process restores the save of K, runs step K+1 with those
// regions in fp32 (spec precision_reference), and its loss and gradient norm are compared with worker B's
// step K+1, from the same state and batch, within pilot.precision_tolerance (docs/precision.md). A
// non-finite figure on either side fails the stage (exit 3); one beyond the tolerance is flagged.
Step precision_check(Run& r) {
  Pilot& p = r.p;
  add_loss_scaler(r);
  const auto& ref = r.a.logs.at(0);
  const std::string declared = ref.hello && ref.hello->shape ? ref.hello->shape->precision : "fp32";
  if (declared == "fp32") return std::nullopt;
  const std::int64_t step = r.k + 1;
  const auto* low = step_line(r.b.logs.at(0), step);
  json section = {
      {"precision", declared}, {"reference", "fp32"}, {"step", step}, {"tolerance", p.cfg.pilot.precision_tolerance}};
  std::string why;
  if (!low || low->autocast != declared)
    why = "the program does not run its forward in pilot.autocast() (step " + std::to_string(step) + " says " +
          (low && !low->autocast.empty() ? low->autocast : std::string("nothing")) +
          "): anchor cannot run that step in fp32";
  else if (r.observed)
    why = "the program loads its own checkpoints: anchor cannot point its load at the save of step " +
          std::to_string(r.k) + " once worker B has saved step " + std::to_string(r.last);
  if (!why.empty()) {
    section.update({{"verdict", "not_checked"}, {"why", why}});
    p.report.set_section("precision", section);
    return std::nullopt;
  }
  p.planned_stages.insert(std::find(p.planned_stages.begin(), p.planned_stages.end(), std::string("memory_probe")),
                          "precision");
  pp::Spec spec = r.spec;
  spec.role = pp::Role::kResume;
  spec.restore = p.ckpt_dir + "/" + checkpoint::step_dir_name(r.k);
  spec.save_at.clear();
  spec.kill_in_save.reset();
  spec.stop_at = step;
  spec.profile_step.reset();
  spec.probe_more.clear();
  spec.precision_reference = true;
  spec.events = r.l.dir + "/precision.events.jsonl";
  const auto t0 = Clock::now();
  Outcome o;
  try {
    o = run_program_worker(p, r.l, spec, "precision");
  } catch (const Error& e) {
    return fail(p, "precision", exit_code_for(e.kind()), with_hint(e));
  }
  if (interrupt_signal()) return interrupted_exit(p);
  const auto* fp32 = o.logs.count(0) ? step_line(o.logs.at(0), step) : nullptr;
  if (o.status != 0 || !fp32 || fp32->autocast != "fp32")
    return fail(p, "precision", ExitCode::kRuntime,
                "the fp32 reference of step " + std::to_string(step) + ": " +
                    (o.status != 0 ? o.error
                     : !fp32       ? std::string("it reported no step ") + std::to_string(step)
                                   : "its step ran in " + fp32->autocast + ", not fp32"));
  const double tol = p.cfg.pilot.precision_tolerance;
  const auto loss = precision_figure(fp32->loss, low->loss, tol);
  const auto norm = precision_figure(fp32->grad_norm, low->grad_norm, tol);
  const bool finite = loss.finite && norm.finite, flagged = loss.flagged || norm.flagged;
  const std::string verdict = !finite ? "non_finite" : flagged ? "flagged" : "ok";
  section.update({{"loss", loss.j},
                  {"grad_norm", norm.j},
                  {"verdict", verdict},
                  {"source", "worker B's step " + std::to_string(step) + " in " + declared +
                                 " against the same step from the same save and batch with pilot.autocast() in "
                                 "fp32 (a process of its own; rank 0's figures)"}});
  p.report.set_section("precision", section);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  json fig = {{"precision", declared}, {"verdict", verdict}, {"step", step}, {"seconds", seconds}};
  if (finite) fig.update({{"loss_rel_diff", loss.rel_diff}, {"grad_norm_rel_diff", norm.rel_diff}});
  const std::string figures = "loss " + low->loss.text() + " (fp32 " + fp32->loss.text() + "), gradient norm " +
                              low->grad_norm.text() + " (fp32 " + fp32->grad_norm.text() + ")";
  if (!finite)
    return fail(p, "precision", ExitCode::kVerification,
                "step " + std::to_string(step) + " in " + declared + " against fp32 is not finite: " + figures);
  if (flagged)
    ANCHOR_LOG_WARN("precision", "step {} in {} differs from fp32 beyond pilot.precision_tolerance {}: {}", step,
                    declared, tol, figures);
  p.report.add_stage({{"stage", "precision"}, {"status", "passed"}, {"seconds", seconds}, {"figures", fig}});
  return std::nullopt;
}

}  // namespace

ExitCode run_program_pilot(Pilot& p) {
  // What a rank leaves behind (a double fork, a setsid'd child) comes here, not to init: each worker
  // ends it once its ranks have ended (ProgramRun::end_leftovers).
  proc::become_subreaper();
  proc::start_sentinel(p.worker_binary);  // and if this process is killed, the sentinel ends them
  Run r(p);
  p.planned_stages = {"reference", "checkpoint_save", "pin",          "kill", "restore",
                      "resume",    "compare",         "memory_probe", "plan"};
  if (p.opts.baseline) p.planned_stages.push_back("reproduce_compare");
  r.k = p.cfg.pilot.steps_before_save;
  r.last = r.k + p.cfg.pilot.steps_after_resume;
  if (p.nproc > 1) p.planned_stages.insert(p.planned_stages.begin() + 1, "ranks_rng");
  if (Step end = node_stages(p)) return *end;
  for (auto step : {prepare, reference, ranks_rng, pin, resume})
    if (Step end = step(r)) return *end;
  compare(r);
  if (!r.observed) {
    const auto at = std::find(p.planned_stages.begin(), p.planned_stages.end(), std::string("compare"));
    p.planned_stages.insert(at + 1, "cross_check");
    if (Step end = cross_check(r)) return *end;
  }
  if (p.cfg.pilot.determinism == "check" || (p.cfg.pilot.determinism == "auto" && !r.verdict->match())) {
    auto at = std::find(p.planned_stages.begin(), p.planned_stages.end(), std::string("cross_check"));
    if (at == p.planned_stages.end()) at = std::find(p.planned_stages.begin(), p.planned_stages.end(), "compare");
    p.planned_stages.insert(at + 1, "determinism");
    if (Step end = determinism(r)) return *end;
  }
  if (!r.verdict->match()) {
    not_planned(r, "the resume does not match its uninterrupted run: a run that does not resume is not planned");
    return resume_mismatch(p, *r.verdict, true, r.control ? r.control->words(false) : "");
  }
  for (auto step : {precision_check, memory_probe, make_plan})
    if (Step end = step(r)) return *end;
  if (Step end = compare_with_baseline(p)) return *end;  // under `anchor reproduce`
  p.report.set_outcome("passed", ExitCode::kOk,
                       r.spec.reshard
                           ? "the program's resume at " + std::to_string(r.spec.reshard->second) + " rank" +
                                 (r.spec.reshard->second > 1 ? "s" : "") + " restored the state its " +
                                 std::to_string(r.spec.reshard->first) + " ranks saved (resharded, bitwise in full)"
                           : "the program's resume matches its uninterrupted run (" + r.verdict->combined.mode + ", " +
                                 std::to_string(p.nproc) + " rank" + (p.nproc > 1 ? "s" : "") + ")");
  return passed(p);
}

}  // namespace anchor::pilot
