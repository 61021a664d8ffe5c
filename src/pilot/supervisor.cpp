// `anchor pilot`: the supervisor. It never trains and has no LibTorch: it
// starts fresh worker processes (anchor-torch), kills one for real, compares,
// and writes the report. Worker A pins the run before it trains. Reads top to bottom as the stage sequence
// (docs/pilot.md).
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/dir_lock.hpp"
#include "anchor/common/faults.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/threads.hpp"
#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/protocol/compare.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/run_report/compare_reports.hpp"
#include "anchor/run_report/plan_inputs.hpp"
#include "anchor/plan/catalog.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/report/keys.hpp"
#include "anchor/report/provenance.hpp"
#include "anchor/report/model_signing.hpp"
#include "anchor/train/loss_scaler.hpp"
#include "anchor/report/statement.hpp"
#include "anchor/protocol/events.hpp"
#include "anchor/protocol/progress.hpp"
#include "anchor/run_report/report_writer.hpp"
#include "outcome.hpp"
#include "pilot_context.hpp"
#include "program_pilot.hpp"
#include "signals.hpp"
#include "anchor/protocol/work_files.hpp"
#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::pilot {

namespace {

// Which worker a WorkerRun starts: A (the reference) or B (the resume, which
// also runs the memory probe once its results are written).
enum class WorkerRole { kReference, kResume };

std::string make_run_id(const std::string& name) {
  auto t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return name + "-" + buf + "-" + fs::random_suffix().substr(0, 4);
}

struct WorkerOutcome {
  int status = -1;
  bool killed_by_us = false;
  std::string open_stage;  // a stage that started and did not end
  int failed_rank = 0;     // the rank whose status this is
  std::string error;       // the worker's own account of its failure ("error" event)
  std::string remote;      // several nodes: the other nodes' ranks that failed on their own
};

// "rank 3 (node 1, host b)": how a stage error names a rank of another node.
std::string rank_on_node(const RemoteRank& r) {
  return "rank " + std::to_string(r.rank) + " (node " + std::to_string(r.node) + (r.host.empty() ? "" : ", " + r.host) +
         ")";
}

// A failed worker's account (`why`), with the other nodes' failed ranks added
// when it does not name them already.
std::string with_remote(std::string why, const WorkerOutcome& w) {
  if (!w.remote.empty() && why.find(w.remote) == std::string::npos) why += " [" + w.remote + "]";
  return why;
}

// The pilot's exit code for a worker that failed: a config/data error (2) or a
// verification failure (3) keeps its meaning; anything else (a crash, a
// signal, an I/O error) is a runtime failure (1).
ExitCode worker_exit_code(int status) {
  return status == 2 || status == 3 ? exit_code_from(status) : ExitCode::kRuntime;
}

// Writes a line to a child's stdin; a child that has ended (EPIPE) is not an
// error here (its status says how it ended) and raises no SIGPIPE.
void write_to_child(int fd, const std::string& line) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  const ssize_t n = ::write(fd, line.data(), line.size());
  if (n < 0 && errno == EPIPE) {
    const timespec none{};
    while (::sigtimedwait(&pipe_set, nullptr, &none) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// One worker's run: its ranks, rank 0's lines relayed, and the other ranks
// watched while rank 0 speaks. Its ranks may start early (start_early), each
// waiting for its release (kReleaseEnv) before it reads its spec: worker B's
// start-up (exec, LibTorch's load) then overlaps worker A's work.
class WorkerRun {
 public:
  WorkerRun(Pilot& p, WorkerRole role)
      : p_(p),
        role_(role),
        spec_path_(protocol::work::spec(p.run_dir, role == WorkerRole::kReference ? "reference" : "resume")),
        name_(role == WorkerRole::kReference ? "reference" : "resume"),
        nproc_(p.nproc),
        nodes_(p.opts.nodes),
        local_(nodes_ ? nodes_->local_world_size() : nproc_),
        port_(nproc_ > 1 ? (nodes_ ? dist::free_port() : dist::free_loopback_port()) : 0),
        watch_(role == WorkerRole::kReference ? "A" : "B", /*may_redraw=*/true),
        grace_(std::min(p.cfg.distributed.timeout_s, 5.0) + 10.0) {}

  WorkerRun(const WorkerRun&) = delete;
  WorkerRun& operator=(const WorkerRun&) = delete;
  // Ranks started early and never released (the pilot ended before them) are
  // stopped and reaped; silently: the pilot's account (events.jsonl, signed
  // with the report) is closed by now.
  ~WorkerRun() {
    if (ranks_.empty() || ran_) return;
    for (auto& c : ranks_) {
      ::kill(c.pid, SIGKILL);
      c.stdin_fd.reset();
      c.stdout_fd.reset();
      proc::wait_exit(c.pid);
    }
  }

  // Starts this node's ranks now, each waiting to be released by run().
  void start_early() {
    early_ = true;
    spawn_ranks();
  }

  // Runs the worker, told what work/<role>.spec.json says (tell_worker wrote
  // it): its ranks started now, or the early ones released.
  WorkerOutcome run() {
    ran_ = true;
    if (ranks_.empty())
      spawn_ranks();
    else
      release_ranks();
    if (nodes_) nodes_->start(name_, port_);  // the other nodes start theirs
    ended_.resize(ranks_.size());
    relay_rank0();
    watch_.stopped();  // a stage still open: the worker ended in it (what follows may log)
    ranks_[0].stdout_fd.reset();
    reap_ranks();
    if (nodes_) collect_remote_ranks();
    return w_;
  }

 private:
  std::string who(int r) const {
    return "worker " + std::string(role_ == WorkerRole::kReference ? "A" : "B") +
           (nproc_ > 1 ? " rank " + std::to_string(r) + (nodes_ ? " (node 0, " + proc::host_name() + ")" : "") : "");
  }

  void spawn_ranks() {
    // The console's account of this worker (progress.hpp): on a terminal its live line.
    const bool live = watch_.live() && log::enabled(log::Level::kInfo);
    for (int r = 0; r < local_; ++r) {
      proc::SpawnOptions so;
      so.capture_stdout = r == 0;  // rank 0 speaks for the group; the others' logs go to stderr
      so.die_with_parent = true;
      if (nodes_)
        so.env = dist::placed_launch_env(r, nproc_, r, local_, nodes_->master_addr(), port_);
      else if (nproc_ > 1)
        so.env = dist::self_launch_env(r, nproc_, port_);
      if (early_) {
        so.pipe_stdin = true;
        so.env[protocol::kReleaseEnv] = "stdin";
      }
      so.env.merge(threads::pool_wait_env());  // idle pool threads sleep soon (threads.hpp)
      so.env[protocol::kLiveProgressEnv] = live ? "1" : "0";
      so.env[protocol::kSpecEnv] = spec_path_;  // what the worker is told (docs/program.md, "The contract")
      std::vector<std::string> argv = {p_.worker_binary, "--log-level", p_.opts.log_level, "__worker"};
      if (!p_.opts.use_hash_cache) argv.push_back("--no-cache");
      ranks_.push_back(proc::spawn(argv, so));
    }
    nlohmann::json pids = nlohmann::json::array();
    for (const auto& c : ranks_) pids.push_back(c.pid);
    p_.events->write({{"event", "worker_started"},
                      {"worker", name_},
                      {"binary", p_.worker_binary},
                      {"pids", pids},
                      {"early", early_}},
                     "supervisor");
  }

  // Releases the ranks started early; one that ended while it waited (killed
  // from outside, out of memory) is said, and the worker is started afresh.
  void release_ranks() {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      if (const auto st = proc::try_wait(ranks_[r].pid)) {
        p_.events->write({{"event", "worker_ended_before_release"}, {"worker", name_}, {"rank", r}, {"status", *st}},
                         "supervisor");
        ANCHOR_LOG_WARN("pilot", "{} ended while it waited for its release ({}); it is started again", who(0),
                        proc::describe_exit(*st));
        for (std::size_t o = 0; o < ranks_.size(); ++o) {
          if (o != r) {  // the ended one is reaped already
            ::kill(ranks_[o].pid, SIGKILL);
            proc::wait_exit(ranks_[o].pid);
          }
        }
        ranks_.clear();  // their pipes closed
        early_ = false;
        spawn_ranks();
        return;
      }
    }
    p_.events->write({{"event", "worker_released"}, {"worker", name_}}, "supervisor");
    for (auto& c : ranks_) {
      write_to_child(c.stdin_fd.get(), "go\n");
      c.stdin_fd.reset();
    }
  }

  // The other ranks, watched while rank 0 speaks: one that dies where rank 0
  // cannot notice (before the rendezvous, in a store wait) would leave it
  // waiting out the whole timeout. After a grace that outlasts rank 0's own
  // diagnosis (a collective with a dead peer fails at once, then rank 0 waits
  // up to min(timeout, 5 s) for the others' accounts: ProcessGroup::fail),
  // every rank is stopped and the dead one named, with how it ended.
  void watch_other_ranks() {
    for (std::size_t r = 1; r < ranks_.size(); ++r) {
      if (ended_[r] || w_.killed_by_us) continue;
      ended_[r] = proc::try_wait(ranks_[r].pid);
      if (ended_[r] && *ended_[r] != 0 && dead_ < 0) {
        dead_ = static_cast<int>(r);
        dead_at_ = std::chrono::steady_clock::now();
        p_.events->write({{"event", "rank_ended"}, {"worker", name_}, {"rank", dead_}, {"status", *ended_[r]}},
                         "supervisor");
      }
    }
    if (dead_ < 0 || !w_.error.empty() || std::chrono::steady_clock::now() - dead_at_ < grace_) return;
    w_.error = who(dead_) + " " + proc::describe_exit(*ended_[dead_]) + " while rank 0 was " +
               (w_.open_stage.empty() ? std::string("starting (rendezvous)") : "in stage " + w_.open_stage) +
               "; every rank of the worker was stopped";
    w_.failed_rank = dead_;
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      if (!ended_[r]) ::kill(ranks_[r].pid, SIGKILL);
  }

  void terminate_ranks() {
    for (const auto& c : ranks_) ::kill(c.pid, SIGTERM);
  }

  // Reads rank 0's stdout until it closes or a signal comes, handling each line.
  void relay_rank0() {
    const int fd = ranks_[0].stdout_fd.get();
    std::string buf;
    char chunk[4096];
    for (;;) {
      if (interrupt_signal()) {  // a signal that came outside poll() (during a read, or the events' handling)
        terminate_ranks();
        break;
      }
      watch_.tick();
      pollfd pfd{fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, ranks_.size() > 1 ? 100 : watch_.poll_ms());
      if (ready < 0 && errno == EINTR) {
        if (interrupt_signal()) {
          terminate_ranks();
          break;
        }
        continue;
      }
      if (ranks_.size() > 1) watch_other_ranks();
      if (ready == 0) continue;
      ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        handle_line(line);
      }
    }
  }

  // One line of rank 0's stdout: a line of the worker protocol after kEventPrefix
  // (worker_protocol.hpp), or the worker's stray output, shown as it is.
  void handle_line(const std::string& line) {
    if (line.rfind(protocol::kEventPrefix, 0) != 0) {
      watch_.erase();
      std::fprintf(stderr, "%s\n", line.c_str());  // a worker's stray stdout: keep it visible
      return;
    }
    protocol::Event ev;
    try {
      ev = protocol::parse_event(line.substr(std::strlen(protocol::kEventPrefix)));
    } catch (const Error& e) {  // not this build's worker: said, not acted on
      watch_.erase();
      ANCHOR_LOG_WARN("pilot", "{}: a line that is not the worker protocol's ({})", who(0), e.what());
      return;
    }
    p_.events->write(ev.raw, "worker-" + name_);
    if (const auto* st = std::get_if<protocol::StageLine>(&ev.body)) {
      if (st->phase == "begin") {
        w_.open_stage = st->stage;
        watch_.started(w_.open_stage);
      } else {
        w_.open_stage.clear();
        watch_.ended();
      }
    } else if (const auto* step = std::get_if<protocol::StepLine>(&ev.body)) {
      if (const auto shown = steps_.saw(*step)) watch_.step(*shown);  // the live line, on a terminal
    } else if (const auto* err = std::get_if<protocol::ErrorLine>(&ev.body); err && w_.error.empty()) {
      w_.error = err->message;
      if (!err->hint.empty()) w_.error += " (hint: " + err->hint + ")";
    } else if (const auto* c = std::get_if<protocol::CheckpointLine>(&ev.body);
               c && c->phase == "kill_window" && role_ == WorkerRole::kReference) {
      kill_in_window(*c);
    }
  }

  // The real thing: SIGKILL in the middle of a save, nothing cooperative; every rank.
  void kill_in_window(const protocol::CheckpointLine& window) {
    nlohmann::json pids = nlohmann::json::array();
    for (const auto& c : ranks_) {
      ::kill(c.pid, SIGKILL);
      pids.push_back(c.pid);
    }
    w_.killed_by_us = true;
    watch_.ended();
    if (nodes_) nodes_->kill(name_);  // and every other node's ranks, relayed through the store
    p_.events->write({{"stage", "kill"},
                      {"event", "sigkill_sent"},
                      {"pid", ranks_[0].pid},
                      {"pids", pids},
                      {"point", window.point},
                      {"nodes", nodes_ ? nodes_->count() : 1}},
                     "supervisor");
  }

  // Waits for every local rank; the worker's status is rank 0's, or the first other rank's failure.
  void reap_ranks() {
    w_.status = proc::wait_exit(ranks_[0].pid);
    // Rank 0 failed: the others are stopped or failing (every collective has a
    // timeout), but one hung outside a collective would never end: stop them all.
    if (w_.status != 0 && !w_.killed_by_us)
      for (std::size_t r = 1; r < ranks_.size(); ++r)
        if (!ended_[r]) ::kill(ranks_[r].pid, SIGKILL);
    for (std::size_t r = 1; r < ranks_.size(); ++r) {
      const int st = ended_[r] ? *ended_[r] : proc::wait_exit(ranks_[r].pid);
      if (w_.status == 0 && st != 0) {
        w_.status = st;
        w_.failed_rank = static_cast<int>(r);
      }
    }
    // Rank 0 stopped by the supervisor for a dead peer: the peer's status is the worker's.
    if (dead_ >= 0 && w_.failed_rank == dead_ && !w_.killed_by_us) w_.status = *ended_[dead_];
    // How rank 0 itself ended, when it said nothing (killed, crashed).
    if (w_.error.empty() && w_.status != 0 && !w_.killed_by_us && w_.failed_rank == 0)
      w_.error = who(0) + " " + proc::describe_exit(w_.status) +
                 (w_.open_stage.empty() ? std::string() : " in stage " + w_.open_stage);
  }

  // The other nodes' ranks: stopped when this side failed; a failure there fails the stage, named.
  void collect_remote_ranks() {
    try {
      nlohmann::json remote = nlohmann::json::array();
      for (const auto& rr : nodes_->collect(name_, (w_.status != 0 && !w_.killed_by_us) || interrupt_signal())) {
        remote.push_back(
            {{"rank", rr.rank}, {"node", rr.node}, {"host", rr.host}, {"status", rr.status}, {"killed", rr.killed}});
        if (rr.status == 0 || rr.killed || w_.killed_by_us) continue;
        const std::string said = rank_on_node(rr) + " " + proc::describe_exit(rr.status);
        w_.remote += (w_.remote.empty() ? "" : "; ") + said;
        if (w_.status == 0) {
          w_.status = rr.status;
          w_.failed_rank = rr.rank;
          w_.error = "worker " + std::string(role_ == WorkerRole::kReference ? "A " : "B ") + said;
        }
      }
      p_.events->write({{"event", "remote_ranks_ended"}, {"worker", name_}, {"ranks", remote}}, "supervisor");
    } catch (const Error& e) {
      w_.remote += (w_.remote.empty() ? "" : "; ") + std::string(e.what());
      if (w_.status == 0) {
        w_.status = 1;
        w_.error = e.what();
      }
    }
  }

  Pilot& p_;
  const WorkerRole role_;
  const std::string spec_path_;
  const std::string name_;
  const int nproc_;
  PilotNodes* const nodes_;  // several nodes: this one runs ranks 0 .. local_world_size - 1
  const int local_;
  const int port_;
  protocol::StageWatch watch_;
  protocol::StepAccount steps_;  // rank 0's step lines, for the live line
  std::vector<proc::Child> ranks_;
  WorkerOutcome w_;
  std::vector<std::optional<int>> ended_;  // the other ranks' statuses, once they have ended
  int dead_ = -1;                          // the first other rank that failed on its own
  std::chrono::steady_clock::time_point dead_at_;
  const std::chrono::duration<double> grace_;
  bool early_ = false, ran_ = false;
};

// Starts a worker (nproc ranks of it for reference and resume: the self-launch,
// docs/distributed.md), relays rank 0's events, and (for the reference)
// SIGKILLs every rank in the kill window. Returns how it ended: rank 0's
// status, or the first other rank's failure.

// What a built-in worker is told, in the worker protocol a user's program is
// told in (docs/program.md, "The contract"): worker A saves K steps from its
// start (0, or the checkpoint pilot.start_from latest restores) and is killed
// in its save K + R; worker B restores the newest step that verifies and runs
// to `stop_at`. Written to work/<role>.spec.json, which every rank (on every
// node) is given in ANCHOR_PILOT_SPEC (WorkerRun) and reads once it runs.
void tell_worker(const Pilot& p, WorkerRole role, std::int64_t stop_at) {
  protocol::Spec spec;
  spec.run_dir = p.run_dir;
  spec.checkpoint_dir = p.ckpt_dir;  // the supervisor's choice (reproduce keeps its own)
  spec.events = protocol::kEventsOnStdout;
  spec.seed = p.cfg.run.seed;
  spec.deterministic = p.cfg.run.deterministic;
  spec.stop_at = stop_at;
  const char* name = "resume";
  if (role == WorkerRole::kReference) {
    name = "reference";
    spec.role = protocol::Role::kReference;
    spec.save_at = {p.cfg.pilot.steps_before_save, stop_at};
    spec.kill_in_save = stop_at;
    spec.start_latest = p.cfg.pilot.start_from == "latest";
  } else {
    spec.role = protocol::Role::kResume;
  }
  std::filesystem::create_directories(protocol::work::dir(p.run_dir));
  fs::atomic_write_file(protocol::work::spec(p.run_dir, name), dump_json(protocol::to_json(spec), 2));
}

}  // namespace

namespace {

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(fs::read_file(path)); }

// export.copy_to (docs/models.md, "Copy off the node"): where worker B copies
// the export, decided here once. A report's config does not choose where
// `anchor reproduce` writes: there it is never used.
void choose_copy_to(Pilot& p) {
  const std::string& dest = p.cfg.exporting.copy_to;
  if (dest.empty()) return;
  if (!p.opts.use_config_dirs) {
    ANCHOR_LOG_INFO("pilot", "export.copy_to of the recorded config is not used by a reproduction: nothing is copied");
    return;
  }
  if (!p.cfg.program.command.empty() || p.cfg.model.source == "torchscript" || !p.cfg.exporting.hf)
    throw Error(ErrorKind::kConfig, "export.copy_to is set but nothing is exported",
                "the export is the built-in GPT's (model.source builtin or safetensors) with export.hf: true; "
                "remove export.copy_to otherwise");
  p.copy_to = config::resolve_path(p.cfg, dest);
  std::error_code ec;
  if (!std::filesystem::is_directory(p.copy_to, ec))
    throw Error(ErrorKind::kConfig, "export.copy_to " + printable(p.copy_to) + " is not a directory",
                "create it, or mount the share there: anchor does not create it (a missing mount would be filled "
                "on the local disk instead)");
}

// Creates the run directory and takes the locks of it and of checkpoint.dir
// (fs::DirLock) before anything is written or removed in either: another
// pilot's stale-temp cleanup or retention would otherwise delete this one's
// save in progress. A run directory made here is removed again when a later
// step fails, but only while this pilot holds its lock: when the lock itself
// is refused, another pilot that found the directory (made here a moment
// before) is using it.
// A run directory that existed must be empty or an earlier pilot's: a pilot writes and replaces its
// files there (report.json, export/, checkpoints/, ...), and must not do so among a user's own files.
// Throws Error (kUsage) naming what is there.
void check_reused_run_dir(const std::string& run_dir) {
  static const std::set<std::string> kAnchors = {fs::DirLock::kFile, "events.jsonl", "report.json", "config.json",
                                                 "manifest.json",    "checkpoints",  "work",        "program"};
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (kAnchors.count(n)) return;
    names.push_back(n);
  }
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  std::string listed;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) listed += (i ? ", " : "") + printable(names[i]);
  if (names.size() > 5) listed += " and " + std::to_string(names.size() - 5) + " more";
  throw Error(ErrorKind::kUsage,
              "the run directory " + printable(run_dir) + " already holds files that are not an anchor run's (" +
                  listed + "); a pilot writes and replaces its files there (report.json, export/, checkpoints/)",
              "pass --run-dir a new or empty directory, or one an earlier pilot wrote");
}

void lock_directories(Pilot& p) {
  choose_copy_to(p);  // a refusal here leaves no run directory behind
  std::error_code ec;
  const bool made = std::filesystem::create_directories(p.run_dir, ec);
  if (ec) throw io_error("create the run directory", p.run_dir, ec.value());
  if (!made) check_reused_run_dir(p.run_dir);
  bool locked = false;
  try {
    p.run_dir = std::filesystem::canonical(p.run_dir).string();
    p.run_lock = fs::DirLock::acquire(p.run_dir, "run directory " + p.run_dir, p.run_id);
    locked = true;
    if (!p.opts.checkpoint_dir.empty())
      p.ckpt_dir = std::filesystem::absolute(p.opts.checkpoint_dir).lexically_normal().string();
    else if (p.opts.use_config_dirs && !p.cfg.checkpoint.dir.empty())
      p.ckpt_dir = config::resolve_path(p.cfg, p.cfg.checkpoint.dir);
    else
      p.ckpt_dir = p.run_dir + "/checkpoints";
    // A pilot from initialisation makes checkpoint.dir; one from `latest`
    // needs it to exist already (check_start_dir says so when it does not).
    if (p.cfg.pilot.start_from != "latest" || std::filesystem::exists(p.ckpt_dir)) {
      std::filesystem::create_directories(p.ckpt_dir, ec);
      if (ec) throw io_error("create checkpoint.dir", p.ckpt_dir, ec.value());
      // checkpoint.dir may be the run directory itself: its lock is held
      // already (a second flock on another descriptor would refuse this pilot).
      if (!std::filesystem::equivalent(p.ckpt_dir, p.run_dir, ec))
        p.ckpt_lock = fs::DirLock::acquire(p.ckpt_dir, "checkpoint.dir " + p.ckpt_dir, p.run_id);
    }
  } catch (...) {
    if (made && locked) std::filesystem::remove_all(p.run_dir, ec);
    p.run_lock = fs::DirLock();
    throw;
  }
}

// One built-in pilot as it goes: what each step leaves for the next.
struct BuiltinRun {
  BuiltinRun(Pilot& pilot, const PilotOptions& o) : p(pilot), opts(o) {}
  Pilot& p;
  const PilotOptions& opts;
  std::unique_ptr<WorkerRun> b_run;  // worker B, started early with worker A (reference_worker)
  WorkerOutcome a, b;
  protocol::WorkerResult ref, res;                           // work/reference.json, work/resume.json (rank 0)
  std::vector<protocol::WorkerResult> ref_ranks, res_ranks;  // ranks 1..n-1, read and checked once
  std::optional<protocol::RankVerdicts> verdict;             // the comparison
};

// Each step returns the pilot's exit code when the pilot ends there, nothing otherwise.
using Step = std::optional<ExitCode>;

// 1. Config: defaults < file < --set; every problem reported at once (exit 2).
//    What a program pilot does not do, the signing key, the ranks and the
//    catalog are all checked here, before anything is written.
// The key that signs the report (docs/report.md, "Signing"): the one the config
// names, `none` for an unsigned report, else the per-user key, made on first
// use. Under `anchor reproduce` the config is a report's: its
// report.signing_key (a path a report chose) is never read, and --signing-key
// takes its place. A key that cannot sign (mode, passphrase, curve) fails here,
// before any training.
void choose_signing_key(Pilot& p) {
  const bool from_config = p.opts.use_config_dirs;
  const std::string& chosen = from_config ? p.cfg.report.signing_key : p.opts.signing_key;
  if (chosen == "none") {
    p.unsigned_reason = from_config ? "report.signing_key is none" : "--signing-key none";
    return;
  }
  if (!chosen.empty()) {
    p.signing_key = from_config ? config::resolve_path(p.cfg, chosen) : chosen;
    report::load_private_key(p.signing_key, report::resolve_passphrase(""));
    return;
  }
  report::UserKey user;
  try {
    user = report::ensure_user_key();
  } catch (const Error& e) {
    // Whatever stopped it (no HOME, a read-only or foreign directory, a key
    // others can read), the ways out depend on the command.
    const std::string ways = from_config ? "or name a key with report.signing_key (anchor keygen makes one), or set "
                                           "report.signing_key: none for an unsigned report"
                                         : "or pass --signing-key KEY, or --signing-key none for an unsigned re-run";
    std::string hint = e.hint().empty() ? std::string("fix that") : e.hint();
    if (const auto at = hint.find(" or pass --passphrase-file FILE"); at != std::string::npos)
      hint.erase(at, std::string(" or pass --passphrase-file FILE").size());  // keygen's option, not this command's
    throw Error(e.kind() == ErrorKind::kIo ? ErrorKind::kConfig : e.kind(),
                std::string("your per-user signing key: ") + e.what(), hint + "; " + ways);
  }
  p.signing_key = user.private_path;
  // Once per machine and user: a warning, so that -q keeps it.
  if (user.created)
    ANCHOR_LOG_WARN("report",
                    "created your signing key {} (key id {}); reports are signed with it unless "
                    "report.signing_key names another key or is none. Others verify them with {}",
                    user.private_path, user.key_id, user.public_path);
}

// A negative control must change the run: ANCHOR_PILOT_FAULT=drop_scaler with the loss scaler off,
// or diverge_replica on one rank, would pass and prove nothing. Refused (exit 2) before anything runs.
void check_pilot_faults(const Pilot& p) {
  for (const auto& f : faults::read("ANCHOR_PILOT_FAULT")) {
    std::string why, fix;
    if (f.point == "drop_scaler" && !train::loss_scaling_enabled(p.cfg.train)) {
      why = "the loss scaler is off in this run (train.precision " + p.cfg.train.precision +
            ", train.loss_scale.enabled " + p.cfg.train.loss_scale.enabled + ")";
      fix = "turn it on (--set train.loss_scale.enabled=true works at any precision)";
    } else if (f.point == "diverge_replica" && p.nproc < 2) {
      why = "it nudges rank 1, and this pilot runs 1 rank";
      fix = "run 2 ranks or more (--set distributed.nproc_per_node=2)";
    }
    if (!why.empty())
      throw Error(ErrorKind::kUsage,
                  "ANCHOR_PILOT_FAULT=" + f.point + " does nothing in this run: " + why +
                      "; a negative control that changes nothing passes and proves nothing",
                  fix + ", or leave " + f.point + " out of ANCHOR_PILOT_FAULT");
  }
}

void configure(Pilot& p, const PilotOptions& opts, int launched_world) {
  p.cfg = opts.config ? *opts.config : config::load(opts.config_path, opts.overrides);
  if (!p.cfg.program.command.empty() && p.cfg.pilot.start_from == "latest")
    throw Error(ErrorKind::kUsage, "pilot.start_from latest with program.command is not supported",
                "leave pilot.start_from at init: a program pilot starts the program from scratch, and the program "
                "decides what it restores (docs/program.md, \"Limits\")");
  // Ranks: the supervisor starts them itself (distributed.nproc_per_node, or as
  // many as the external launcher started: docs/distributed.md).
  // Each worker rank picks its device and backend itself (it has LibTorch):
  // dist::rank_device, dist::choose_backend.
  p.nproc = launched_world > 0 ? launched_world : p.cfg.distributed.nproc_per_node;
  p.launched = launched_world > 0;
  if (launched_world > 0 && p.cfg.pilot.resume_world_size > 0 && p.cfg.pilot.resume_world_size != launched_world)
    throw Error(ErrorKind::kUsage,
                "pilot.resume_world_size is " + std::to_string(p.cfg.pilot.resume_world_size) + ", but " +
                    std::to_string(launched_world) +
                    " ranks were started by an external launcher (torchrun or srun), which fixes the world size",
                "run `anchor pilot CONFIG` by itself: anchor then starts worker B's ranks at pilot.resume_world_size "
                "(docs/program.md, \"Resuming at another world size\")");
  if (p.cfg.program.command.empty()) check_pilot_faults(p);
  // The accelerator catalog the plan uses: a bad one fails now, not after training.
  // A program pilot plans only when the program declares its shape: a catalog
  // problem then leaves it unplanned (saying why) rather than refusing the pilot.
  // Read by its absolute path, which the plan records with the bytes' digest
  // (a bundle carries exactly that catalog; reproducing one uses it: opts.catalog).
  auto load = [&] {
    return plan::load_catalog(
        std::filesystem::absolute(plan::find_catalog(p.cfg, opts.catalog)).lexically_normal().string());
  };
  if (p.cfg.program.command.empty()) {
    p.catalog = load();
  } else {
    try {
      p.catalog = load();
    } catch (const Error& e) {
      p.catalog_problem = with_hint(e);
    }
  }
  // Last: a pilot refused for anything above has not made a key.
  choose_signing_key(p);
}

// 2. The run directory and checkpoint.dir, locked for this pilot's life
//    (another pilot on either is refused, exit 2), its event log and the
//    report begun.
void open_run(Pilot& p, const PilotOptions& opts) {
  p.run_id = make_run_id(p.cfg.run.name);
  // Under `anchor reproduce` (use_config_dirs false) the config's directories
  // are a report's say-so: only the command line places the run.
  const std::string output_dir = opts.use_config_dirs ? p.cfg.run.output_dir : config::Config{}.run.output_dir;
  p.run_dir = opts.run_dir.empty() ? output_dir + "/" + p.run_id : opts.run_dir;
  lock_directories(p);
  // A reused run directory's profile is not this run's (worker B writes this one's; a program pilot,
  // or one that stops before worker B's last step, has none): never signed as this run's. Nor are its
  // envelopes this run's: an unsigned or failed run must not sit beside an earlier signature.
  // Nor its export of the final weights (worker B writes this run's, when it gets there).
  for (const char* earlier :
       {"profile.json", report::kEnvelopeFile, report::kProvenanceFile, report::kModelSignatureFile, "export"}) {
    std::error_code stale;
    std::filesystem::remove_all(p.run_dir + "/" + earlier, stale);  // a link itself, never what it names
  }
  p.events = std::make_unique<EventLog>(p.run_dir + "/events.jsonl");
  p.report.begin(p.run_id, p.cfg, opts.config_path);
  if (opts.baseline) {
    // What is reproduced and with which key, in the report from the start; and where its checkpoints went.
    nlohmann::json reproduces = opts.reproduces;
    set_path_field(reproduces, "checkpoint_dir", p.ckpt_dir);
    p.report.set_reproduces(reproduces);
  }
}

// From here on a failure is a failed stage with a report (where the run
// directory takes one), never a bare exception.
Step write_effective_config(Pilot& p) {
  try {
    // Leftovers of an earlier, killed run in a shared checkpoint.dir: never loaded, removed now.
    if (std::filesystem::exists(p.ckpt_dir))
      for (const auto& gone : checkpoint::Store(p.ckpt_dir).remove_stale_temps())
        ANCHOR_LOG_INFO("pilot", "removed stale temporary checkpoint {}", gone);
    // base_dir and source_path are read back as paths: the exact bytes are
    // kept (set_path_field) even when they are not UTF-8. The workers take the
    // checkpoint directory from their spec (tell_worker), not from the config:
    // the supervisor alone decides it (reproduce overrides it).
    nlohmann::json cj = {{"config", config::to_json(p.cfg)}, {"run_id", p.run_id}};
    set_path_field(cj, "base_dir", p.cfg.base_dir);
    set_path_field(cj, "source_path", p.cfg.source_path);
    if (!p.copy_to.empty()) set_path_field(cj, "copy_to", p.copy_to);
    fs::atomic_write_file(p.run_dir + "/config.json", dump_json(cj, 2));
  } catch (const Error& e) {
    return fail(p, "prepare", exit_code_for(e.kind()), with_hint(e));
  }
  return std::nullopt;
}

// Several nodes: every node must see this run directory and the checkpoints.
// Then where worker A may start (docs/pilot.md, "Starting from a checkpoint"):
// the directory names alone, before any worker; worker A verifies and checks the fit.
Step before_workers(BuiltinRun& r) {
  Pilot& p = r.p;
  if (r.opts.nodes) {
    try {
      r.opts.nodes->share_run_dir(p.run_dir, p.ckpt_dir);
    } catch (const Error& e) {
      return fail(p, "nodes", exit_code_for(e.kind()), with_hint(e));
    }
  }
  // 3. Pinning happens in worker A, before it trains: the manifest's libraries
  //    and runtime versions are those of the process that trains, and this
  //    supervisor never loads LibTorch. `anchor reproduce` pinned already.
  if (r.opts.pinned_manifest)
    fs::atomic_write_file(p.run_dir + "/manifest.json", dump_json(*r.opts.pinned_manifest, 2));
  if (interrupt_signal()) return interrupted_exit(p);
  p.report.set_start({{"from", p.cfg.pilot.start_from}});
  if (auto why = check_start_dir(p.cfg, p.ckpt_dir); !why.empty()) return fail(p, "start", ExitCode::kUsage, why);
  return std::nullopt;
}

// Why worker A ended before its kill window, with the precision stage's
// non-finite tensors when that is where it stopped.
std::string reference_failure(const Pilot& p, const WorkerOutcome& a) {
  std::string why = with_remote(
      a.error.empty() ? "worker A exited with status " + std::to_string(a.status) + " before its kill window" : a.error,
      a);
  if (const auto report = p.report.typed();
      a.error.empty() && a.open_stage == "precision" && report.precision && report.precision->non_finite)
    for (const auto& n : *report.precision->non_finite)
      why += (why.find(": non-finite") == std::string::npos ? ": non-finite " : ", ") + n.what.value_or("") + " " +
             n.tensor.value_or("");
  return why;
}

// What a worker that failed or was interrupted finished before: its stages, with their figures,
// and worker A's training steps (work::stages_so_far), into the report, so that it keeps what
// passed. Read as untrusted: a file that is not what a worker writes adds nothing, and says so.
void keep_stages_so_far(Pilot& p, const char* role) {
  const std::string path = protocol::work::stages_so_far(p.run_dir, role);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  try {
    const nlohmann::json j = read_json(path);
    const JsonFields f(j, path);
    const nlohmann::json& stages = f.array("stages");
    const nlohmann::json& steps = f.array("train_steps");
    run_report::RunReport::from_json({{"stages", stages}, {"steps", {{"train", steps}}}});  // their shape, or throws
    for (const auto& s : stages) p.report.add_stage(s);
    if (!steps.empty()) p.report.set_train_steps(steps);
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("pilot", "{} not read ({}): the report lacks the stages worker {} passed before it stopped",
                    printable(path), printable(e.what()), role);
  }
}

// The results of ranks 1.. of a worker (rank 0's is read apart: it carries the stages).
std::vector<protocol::WorkerResult> read_other_ranks(const Pilot& p, const char* role) {
  std::vector<protocol::WorkerResult> out;
  for (int rank = 1; rank < p.nproc; ++rank)
    out.push_back(protocol::read_worker_result(protocol::work::result(p.run_dir, role, rank), role));
  return out;
}

// 4. Worker A: load, train K, eval, save + commit, R reference steps, second save -> SIGKILL.
Step reference_worker(BuiltinRun& r) {
  Pilot& p = r.p;
  const std::string start_json =
      protocol::work::start(p.run_dir);  // worker A writes it when it starts from a checkpoint
  std::filesystem::remove(start_json);   // not a reused run directory's
  try {
    tell_worker(p, WorkerRole::kReference, p.cfg.pilot.steps_before_save + p.cfg.pilot.steps_after_resume);
  } catch (const Error& e) {
    return fail(p, "reference", exit_code_for(e.kind()), with_hint(e));
  }
  // Worker B's process starts now, with worker A's: its start-up (exec, LibTorch's load) overlaps
  // A's, and it waits, reading nothing, until A is killed and B is told its task. One process only:
  // several ranks rendezvous at a port chosen when they start, which must not wait out worker A.
  if (p.nproc == 1 && !p.opts.nodes) {
    r.b_run = std::make_unique<WorkerRun>(p, WorkerRole::kResume);
    try {
      r.b_run->start_early();
    } catch (const Error& e) {  // started when it is due instead (resume_worker)
      ANCHOR_LOG_WARN("pilot", "worker B could not start early ({}); it starts after worker A", e.what());
      r.b_run.reset();
    }
  }
  std::filesystem::remove(protocol::work::stages_so_far(p.run_dir, "reference"));  // a reused run directory's
  WorkerRun worker_a(p, WorkerRole::kReference);
  r.a = worker_a.run();
  const WorkerOutcome& a = r.a;
  p.report.set_start(std::filesystem::exists(start_json) ? read_json(start_json)
                                                         : nlohmann::json{{"from", p.cfg.pilot.start_from}});
  if (std::filesystem::exists(p.run_dir + "/manifest.json"))
    p.report.set_manifest(read_json(p.run_dir + "/manifest.json"));
  // The numerical validation of train.precision, passed or not (docs/precision.md).
  if (std::filesystem::exists(protocol::work::precision(p.run_dir)))
    p.report.set_precision(read_json(protocol::work::precision(p.run_dir)));
  if (interrupt_signal() || !a.killed_by_us) keep_stages_so_far(p, "reference");
  if (interrupt_signal()) return interrupted_exit(p);
  if (!a.killed_by_us)
    return fail(p, a.open_stage.empty() ? "reference" : a.open_stage, worker_exit_code(a.status),
                reference_failure(p, a));
  if (a.status != 128 + SIGKILL)
    return fail(p, "kill", ExitCode::kRuntime,
                "worker A ended with status " + std::to_string(a.status) + ", not by SIGKILL");
  try {
    r.ref = protocol::read_worker_result(protocol::work::result(p.run_dir, "reference"), "reference");
    r.ref_ranks = read_other_ranks(p, "reference");
  } catch (const Error& e) {
    return fail(p, "reference", exit_code_for(e.kind()), with_hint(e));
  }
  for (const auto& s : r.ref.stages) p.report.add_stage(s);
  if (p.nproc > 1 && r.ref.start.value("from", "") == "latest") {
    // Every rank's RNG at the start: after a world-size change some are re-derived (docs/checkpoints.md).
    auto start = r.ref.start;
    start["rng_restore_per_rank"] = nlohmann::json::array({start.value("rng_restore", nlohmann::json())});
    for (const auto& o : r.ref_ranks)
      start["rng_restore_per_rank"].push_back(o.start.value("rng_restore", nlohmann::json()));
    p.report.set_start(start);
  }
  // 5. The kill left a torn save on disk: the evidence that restore must skip it.
  p.stage("kill", [&] {
    nlohmann::json torn = nlohmann::json::array();
    for (const auto& e : std::filesystem::directory_iterator(p.ckpt_dir))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) torn.push_back(e.path().filename().string());
    return nlohmann::json{{"signal", "SIGKILL"}, {"exit_status", a.status}, {"torn_checkpoints", torn}};
  });
  return std::nullopt;
}

// 6. Worker B, a fresh process: restore the newest committed checkpoint, eval, resume R steps.
Step resume_worker(BuiltinRun& r) {
  Pilot& p = r.p;
  // A reused run directory's; before worker B (perhaps started early, waiting) is told its task.
  std::filesystem::remove(protocol::work::stages_so_far(p.run_dir, "resume"));
  try {  // worker A's saved step and R more: where worker A was killed
    tell_worker(p, WorkerRole::kResume, *r.ref.saved_step + p.cfg.pilot.steps_after_resume);
  } catch (const Error& e) {
    return fail(p, "resume", exit_code_for(e.kind()), with_hint(e));
  }
  if (!r.b_run) r.b_run = std::make_unique<WorkerRun>(p, WorkerRole::kResume);
  r.b = r.b_run->run();
  const WorkerOutcome& b = r.b;
  if (interrupt_signal() || b.status != 0) keep_stages_so_far(p, "resume");
  if (interrupt_signal()) return interrupted_exit(p);
  if (b.status != 0) {
    const std::string who = "worker B" + (p.nproc > 1 ? " rank " + std::to_string(b.failed_rank) : std::string());
    return fail(p, b.open_stage.empty() ? "resume" : b.open_stage, worker_exit_code(b.status),
                with_remote(b.error.empty() ? who + " exited with status " + std::to_string(b.status) : b.error, b));
  }
  try {
    r.res = protocol::read_worker_result(protocol::work::result(p.run_dir, "resume"), "resume");
    r.res_ranks = read_other_ranks(p, "resume");
  } catch (const Error& e) {
    return fail(p, "resume", exit_code_for(e.kind()), with_hint(e));
  }
  for (const auto& s : r.res.stages) {
    auto st = run_report::section_from_json<run_report::Stage>(s);
    if (st.figures && st.figures->profile) {  // worker B's profiled step: its top operators, from its trace
      add_top_operators(p.run_dir, *st.figures->profile);
      p.report.add_stage(run_report::section_to_json(st));
    } else {
      p.report.add_stage(s);
    }
  }
  return std::nullopt;
}

// The verdict: rank 0's, and with several ranks every rank's against its own reference.
void compare_ranks(BuiltinRun& r) {
  Pilot& p = r.p;
  p.stage("compare", [&] {
    const double tol = p.cfg.device == "cpu" ? 0.0 : p.cfg.pilot.tolerance;
    std::vector<protocol::Verdict> ranks{protocol::compare_resume(r.ref, r.res, tol)};
    for (int rank = 1; rank < p.nproc; ++rank)
      ranks.push_back(protocol::compare_resume(r.ref_ranks.at(rank - 1), r.res_ranks.at(rank - 1), tol));
    r.verdict.emplace(std::move(ranks));
    return compare_stage_figures(*r.verdict, p.nproc);
  });
}

// 7. Compare B with A: bitwise on CPU; with several ranks every rank's resume
//    against its own reference (its batches, its RNG).
Step compare_workers(BuiltinRun& r) {
  Pilot& p = r.p;
  try {
    compare_ranks(r);
  } catch (const Error& e) {  // results without what the comparison needs (read_worker_result checks them)
    return fail(p, "compare", exit_code_for(e.kind()), with_hint(e));
  }
  p.report.set_resume(r.ref, r.res, r.verdict->to_json());
  return std::nullopt;
}

// Per rank: its share of the state next to DDP's, and the measured step's comm time (docs/report.md).
Step distributed_section(BuiltinRun& r) {
  Pilot& p = r.p;
  if (p.nproc > 1) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int rank = 0; rank < p.nproc; ++rank) {
      const protocol::WorkerResult& rj = rank == 0 ? r.ref : r.ref_ranks.at(rank - 1);
      auto row = rj.sharding.is_object() ? rj.sharding : nlohmann::json::object();
      row["rank"] = rank;
      if (p.opts.nodes) {
        row["node"] = rank / p.opts.nodes->local_world_size();
        row["host"] = p.opts.nodes->host(rank / p.opts.nodes->local_world_size());
      }
      row["comm_s"] = rj.train_steps.back().comm_s;  // the measured step
      ranks.push_back(row);
    }
    p.report.set_distributed({{"strategy", p.cfg.distributed.strategy},
                              {"world_size", p.nproc},
                              {"backend", r.ref.backend},
                              {"nodes", p.opts.nodes ? p.opts.nodes->count() : 1},
                              {"per_rank", ranks},
                              {"rng_restore", r.res.rng_restore}});
  }
  // Rank 0's worker B verified the checkpoint it restored: not read a third time
  // here, while it is exactly as B saw it. A view of any other directory than
  // the one B says it restored is not taken.
  const auto& seen = r.res.restored_seen;
  if (!seen.empty() && r.res.restored_step && seen.dir.name == checkpoint::step_dir_name(*r.res.restored_step) &&
      std::filesystem::path(r.res.restored_dir).filename() == seen.dir.name)
    p.seen_checkpoints.push_back(seen);
  p.report.add_checkpoints(p.ckpt_dir, p.run_dir, p.seen_checkpoints);
  return std::nullopt;
}

// 8. The memory probe (run by worker B after its results): the step's peak at
//    other micro-batches and sequence lengths, for the plan's memory model.
// 9. The plan for the long run, from what was measured (docs/plan.md).
Step probe_and_plan(BuiltinRun& r) {
  Pilot& p = r.p;
  protocol::WorkerResult probe;
  try {
    probe = protocol::read_worker_result(protocol::work::result(p.run_dir, "probe"), "probe");
  } catch (const Error& e) {
    return fail(p, "memory_probe", exit_code_for(e.kind()), with_hint(e));
  }
  for (const auto& s : probe.stages) p.report.add_stage(s);
  // One rank: the configured shape's point is worker A's measured step (the probe measures only the others).
  nlohmann::json points = nlohmann::json::array();
  if (p.nproc == 1) {
    const auto& sm = r.ref.step_memory.tensors;
    points.push_back(protocol::MemoryPoint{p.cfg.train.micro_batch, p.cfg.data.seq_len, sm.peak_allocated_bytes,
                                           sm.peak_reserved_bytes, r.ref.state_bytes, "reference", std::nullopt}
                         .to_json());
  }
  for (const auto& pt : probe.memory_points) points.push_back(pt.to_json());
  p.report.set_memory_points(points);
  if (!probe.activation_checkpointing.is_null()) p.report.set_activation_checkpointing(probe.activation_checkpointing);
  try {
    signal_fault_at_plan();
    p.stage("plan", [&] {
      auto plan = plan::make_plan(run_report::measured_from_report(p.report.typed()), p.catalog, p.cfg);
      p.report.set_plan(plan);
      return nlohmann::json{{"recommendation", plan.value("recommendation", nlohmann::json())}};
    });
  } catch (const Error& e) {
    return fail(p, "plan", exit_code_for(e.kind()), e.what());
  }
  return std::nullopt;
}

// 10. `anchor reproduce`: the re-run against the report it reproduces.
Step reproduce_compare(BuiltinRun& r) { return compare_with_baseline(r.p); }

}  // namespace

std::string refusal_junit_xml(const Error& e) {
  const bool config = e.kind() == ErrorKind::kUsage || e.kind() == ErrorKind::kConfig;
  const char* type = e.kind() == ErrorKind::kUsage          ? "usage"
                     : e.kind() == ErrorKind::kConfig       ? "config"
                     : e.kind() == ErrorKind::kVerification ? "verification"
                     : e.kind() == ErrorKind::kIo           ? "io"
                                                            : "runtime";
  std::string message = e.what();
  if (const auto* c = dynamic_cast<const config::ConfigError*>(&e))  // its problems, as main prints them
    for (const auto& problem : c->problems()) message += "\n  " + problem.format();
  if (!e.hint().empty()) message += "\nhint: " + e.hint();
  return run_report::junit_error_xml(config ? "config" : "start", type, message, protocol::utc_now().substr(0, 19));
}

ExitCode run_supervisor(const PilotOptions& opts, int launched_world) {
  Pilot p;
  p.opts = opts;
  p.worker_binary = opts.worker_binary.empty() ? proc::self_exe() : opts.worker_binary;
  if (::access(p.worker_binary.c_str(), X_OK) != 0)
    throw Error(ErrorKind::kRuntime, "the pilot's worker binary " + p.worker_binary + " is missing or not executable",
                "anchor-torch is built and installed next to anchor; rebuild with `make build`");
  configure(p, opts, launched_world);
  open_run(p, opts);
  if (Step end = write_effective_config(p)) return *end;
  install_signal_handlers();
  ANCHOR_LOG_INFO("pilot", "run {} in {}", p.run_id, p.run_dir);
  // The user's own program as the workers (program.command): its own driver.
  if (!p.cfg.program.command.empty()) return run_program_pilot(p);

  BuiltinRun r(p, opts);
  p.planned_stages = {"pin",
                      "load",
                      "train",
                      "eval",
                      "checkpoint_save",
                      "reference",
                      "kill",
                      "restore",
                      "eval_after_restore",
                      "resume",
                      "export",
                      "compare",
                      "memory_probe",
                      "plan"};
  if (!p.copy_to.empty()) p.planned_stages.insert(p.planned_stages.begin() + 11, "copy_off");
  if (opts.baseline) p.planned_stages.push_back("reproduce_compare");
  if (Step end = node_stages(p)) return *end;
  for (auto step : {before_workers, reference_worker, resume_worker, compare_workers, distributed_section,
                    probe_and_plan, reproduce_compare})
    if (Step end = step(r)) return *end;

  // 11. Outcome, report, summary.
  if (!r.verdict->match()) return resume_mismatch(p, *r.verdict, true);
  p.report.set_outcome("passed", ExitCode::kOk,
                       "resume matches the uninterrupted run (" + r.verdict->combined.mode + ")");
  return passed(p);
}

}  // namespace anchor::pilot
