// `anchor pilot` under torchrun or srun (docs/distributed.md): the launched
// processes meet through c10d's store, so this needs LibTorch and lives in
// anchor-torch; the front end hands the command over (src/cli/bridge.hpp).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sentinel.hpp"
#include "anchor/common/threads.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/store.hpp"
#include "anchor/common/faults.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/protocol/work_files.hpp"
#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::pilot {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The launcher's store, keys under "anchor-launch/" (docs/distributed.md,
// "The pilot over several nodes"):
//   pilot/exit, pilot/ack          rank 0's exit code; how many launched processes read it
//   pilot/run_dir                  {"run_dir", "ckpt_dir", "nonce"}: the run the supervisor chose
//                                  (ckpt_dir only when checkpoint.dir is outside the run directory)
//   pilot/node/<k>                 node k's agent: {"ok", "host", "error", "hint"}
//   pilot/start/<i>                the i-th worker group to start (0, 1, ...): {"group", "port" (its
//                                  store's, on node 0), "program" (a program pilot's: {"argv", "cwd", "env"})}
//   pilot/<group>/kill|stop        the relayed kill; the supervisor's side failed
//   pilot/<group>/node/<k>         node k's ranks of the group: [{"rank", "status", "killed"}]
const char* const kSupervisor = "rank 0 (the pilot's supervisor)";
const char* const kNonceFile = ".anchor-node-check";

bool expired(Clock::time_point deadline) { return Clock::now() >= deadline; }
Clock::time_point after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
void pause_briefly() { ::usleep(10000); }  // the store is polled, every wait bounded

std::string seconds(double s) {
  std::ostringstream o;
  o << s << " s (distributed.timeout_s)";
  return o.str();
}

std::string group_key(const std::string& group, const std::string& what) { return "pilot/" + group + "/" + what; }

// The supervisor's side of the other nodes: PilotNodes over the launcher's store.
class StoreNodes : public PilotNodes {
 public:
  StoreNodes(dist::Store& store, const dist::LaunchEnv& launch, double timeout_s)
      : store_(store), launch_(launch), timeout_s_(timeout_s) {
    hosts_.assign(static_cast<std::size_t>(count()), "");
    hosts_[0] = proc::host_name();
  }
  int count() const override { return launch_.world_size / launch_.local_world_size; }
  int local_world_size() const override { return launch_.local_world_size; }
  std::string master_addr() const override { return launch_.master_addr; }
  std::string host(int node) const override { return hosts_.at(static_cast<std::size_t>(node)); }

  void share_run_dir(const std::string& run_dir, const std::string& ckpt_dir) override {
    const std::string nonce = fs::random_suffix();
    std::vector<std::string> marks = {run_dir + "/" + kNonceFile};
    std::filesystem::create_directories(ckpt_dir);
    if (std::filesystem::canonical(ckpt_dir) != std::filesystem::path(run_dir) / "checkpoints")
      marks.push_back(ckpt_dir + "/" + kNonceFile);
    for (const auto& m : marks) fs::atomic_write_file(m, nonce);
    store_.set(
        "pilot/run_dir",
        json{{"run_dir", run_dir}, {"ckpt_dir", marks.size() > 1 ? ckpt_dir : std::string()}, {"nonce", nonce}}.dump());
    ANCHOR_LOG_INFO("pilot", "{} nodes: waiting for every node to see {}", count(), run_dir);
    const auto deadline = after(timeout_s_);
    std::vector<json> answers(static_cast<std::size_t>(count()));
    for (int k = 1; k < count(); ++k) {
      std::optional<std::string> a;
      while (!(a = store_.try_get("pilot/node/" + std::to_string(k), kSupervisor))) {
        if (expired(deadline)) {
          for (const auto& m : marks) std::filesystem::remove(m);
          throw Error(ErrorKind::kRuntime,
                      "node " + std::to_string(k) + " (rank " + std::to_string(k * local_world_size()) +
                          ") did not answer within " + seconds(timeout_s_),
                      "start `anchor pilot` on every node of the launch with the same config");
        }
        pause_briefly();
      }
      answers[static_cast<std::size_t>(k)] = json::parse(*a);
      hosts_[static_cast<std::size_t>(k)] = answers[static_cast<std::size_t>(k)].value("host", "");
    }
    for (const auto& m : marks) std::filesystem::remove(m);
    for (int k = 1; k < count(); ++k)
      if (!answers[static_cast<std::size_t>(k)].value("ok", false))
        throw Error(ErrorKind::kConfig, answers[static_cast<std::size_t>(k)].value("error", ""),
                    answers[static_cast<std::size_t>(k)].value("hint", ""));
  }

  void start(const std::string& group, int port) override {
    store_.set("pilot/start/" + std::to_string(started_++), json{{"group", group}, {"port", port}}.dump());
  }
  void start_program(const std::string& group, int port, const json& launch) override {
    store_.set("pilot/start/" + std::to_string(started_++),
               dump_json(json{{"group", group}, {"port", port}, {"program", launch}}));
  }
  void kill(const std::string& group) override { store_.set(group_key(group, "kill"), "1"); }

  std::vector<RemoteRank> collect(const std::string& group, bool stop) override {
    if (stop) store_.set(group_key(group, "stop"), "1");
    // The other nodes' ranks end with rank 0's (every collective has the
    // timeout); one that does not within it is stopped, then given up on.
    auto deadline = after(timeout_s_);
    std::vector<RemoteRank> out;
    for (int k = 1; k < count(); ++k) {
      std::optional<std::string> a;
      while (!(a = store_.try_get(group_key(group, "node/" + std::to_string(k)), kSupervisor))) {
        if (expired(deadline)) {
          if (stop)
            throw Error(ErrorKind::kRuntime,
                        "node " + std::to_string(k) + " (" + host(k) + ") did not report its ranks of the " + group +
                            " worker within " + seconds(timeout_s_),
                        "look at that node's output: its agent or ranks may hang");
          ANCHOR_LOG_WARN("pilot", "node {} has not reported its ranks of the {} worker in {} s: stopping them", k,
                          group, timeout_s_);
          stop = true;
          store_.set(group_key(group, "stop"), "1");
          deadline = after(timeout_s_);
        }
        pause_briefly();
      }
      for (const auto& r : json::parse(*a))
        out.push_back({r.value("rank", 0), k, host(k), r.value("status", -1), r.value("killed", false)});
    }
    std::sort(out.begin(), out.end(), [](const RemoteRank& x, const RemoteRank& y) { return x.rank < y.rank; });
    return out;
  }

 private:
  dist::Store& store_;
  dist::LaunchEnv launch_;
  double timeout_s_;
  std::vector<std::string> hosts_;
  int started_ = 0;  // the worker groups started so far
};

// Waits for the first of `keys` to be set (following the store's liveness);
// returns its index and value.
std::pair<std::size_t, std::string> wait_any(dist::Store& store, const std::vector<std::string>& keys) {
  for (;;) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (auto v = store.try_get(keys[i], kSupervisor)) return {i, *v};
    pause_briefly();
  }
}

ExitCode read_verdict(dist::Store& store) {
  const int code = std::stoi(store.wait_get("pilot/exit", kSupervisor));
  store.add("pilot/ack", 1);
  ANCHOR_LOG_INFO("pilot", "rank 0's pilot exited with {}", code);
  return exit_code_from(code);
}

// Whether `dir` holds the supervisor's nonce: "" when it does, else why not.
std::string nonce_problem(const std::string& dir, const std::string& nonce) {
  const std::string f = dir + "/" + kNonceFile;
  std::error_code ec;
  if (!std::filesystem::exists(f, ec)) return f + " does not exist here";
  try {
    if (fs::read_file(f) != nonce) return f + " holds another run's mark";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Refuses a node that does not see the run: the supervisor's nonce must be in
// the run directory (and checkpoint.dir when it lies outside it). Says so
// through the store either way; on a refusal waits for the pilot's verdict,
// then throws Error (kConfig).
void check_run_visible(const dist::LaunchEnv& launch, dist::Store& store, int node, const std::string& host,
                       const json& shared) {
  const std::string run_dir = shared.value("run_dir", "");
  // Fault injection (tests): this node looks for the run somewhere else, as a node without the shared mount would.
  const bool hide = !faults::read("ANCHOR_NODE_FAULT").empty();  // hide_run_dir, its one point (src/common/faults.cpp)
  std::string problem = nonce_problem(hide ? run_dir + "-hidden" : run_dir, shared.value("nonce", ""));
  const std::string ckpt_dir = shared.value("ckpt_dir", "");
  if (problem.empty() && !ckpt_dir.empty())  // checkpoint.dir outside the run directory: checked too
    problem = nonce_problem(hide ? ckpt_dir + "-hidden" : ckpt_dir, shared.value("nonce", ""));
  if (!problem.empty()) {
    const std::string what = "run directory " + run_dir + " is not visible on node " + std::to_string(node) +
                             " (rank " + std::to_string(launch.rank) + ", host " + host + "): " + problem +
                             "; the pilot over several nodes needs one filesystem for its run directory and "
                             "checkpoints (every rank writes into rank 0's save)";
    const std::string hint =
        "put the run on a path every node mounts: --run-dir, run.output_dir or checkpoint.dir on "
        "a shared filesystem";
    store.set("pilot/node/" + std::to_string(node),
              dump_json(json{{"ok", false}, {"host", host}, {"error", what}, {"hint", hint}}));
    read_verdict(store);
    throw Error(ErrorKind::kConfig, what, hint);
  }
  store.set("pilot/node/" + std::to_string(node), json{{"ok", true}, {"host", host}}.dump());
}

// Starts this node's ranks (base .. base + local_world_size - 1) of a worker group: anchor's
// worker, or a program pilot's program as the supervisor launches it (`program`: {"argv", "cwd", "env"}).
std::vector<pid_t> spawn_node_ranks(const dist::LaunchEnv& launch, const PilotOptions& opts, const std::string& binary,
                                    const std::string& run_dir, const std::string& group, int base, int port,
                                    const json& program) {
  std::vector<pid_t> pids;
  for (int lr = 0; lr < launch.local_world_size; ++lr) {
    proc::SpawnOptions so;
    so.die_with_parent = true;
    std::vector<std::string> argv;
    if (program.is_object()) {
      const JsonFields f(program, "the program's launch");
      for (const auto& [k, v] : f.object("env").items()) so.env[k] = v.get<std::string>();
      so.unset = dist::outer_launch_variables();  // this agent's own launch: the program's rank is anchor's
      so.new_process_group = true;
      so.cwd = f.str("cwd");
      argv = f.strings("argv");
    } else {
      so.env.merge(threads::pool_wait_env());  // idle pool threads sleep soon (threads.hpp)
      so.env["ANCHOR_LIVE_PROGRESS"] = "0";    // no live line here (include/anchor/protocol/progress.hpp)
      so.env[protocol::kSpecEnv] = protocol::work::spec(run_dir, group);  // written by the supervisor before the start
      argv = {binary, "--log-level", opts.log_level, "__worker"};
      if (!opts.use_hash_cache) argv.push_back("--no-cache");
    }
    for (auto& [k, v] :
         dist::placed_launch_env(base + lr, launch.world_size, lr, launch.local_world_size, launch.master_addr, port))
      so.env[k] = v;
    pids.push_back(proc::spawn(argv, so).pid);
  }
  return pids;
}

// Waits for this node's ranks of a group, SIGKILLing them on the relayed kill
// or stop (or the pilot's end); returns their statuses.
// `leaders`: each rank leads its process group (a program's), which is killed whole.
json wait_node_ranks(dist::Store& store, const std::vector<pid_t>& pids, int node, const std::string& group, int base,
                     bool leaders) {
  json statuses = json::array();
  std::vector<bool> done(pids.size(), false), killed(pids.size(), false);
  bool kill_sent = false;
  std::size_t left = pids.size();
  try {
    while (left > 0) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        int st = 0;
        if (done[i] || ::waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
        done[i] = true;
        --left;
        const int status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
        statuses.push_back({{"rank", base + static_cast<int>(i)}, {"status", status}, {"killed", bool(killed[i])}});
      }
      if (left == 0) break;
      if (!kill_sent &&
          (store.try_get(group_key(group, "kill"), kSupervisor) ||
           store.try_get(group_key(group, "stop"), kSupervisor) || store.try_get("pilot/exit", kSupervisor))) {
        for (std::size_t i = 0; i < pids.size(); ++i)
          if (!done[i]) {
            ::kill(leaders ? -pids[i] : pids[i], SIGKILL);
            killed[i] = true;
          }
        kill_sent = true;
        ANCHOR_LOG_INFO("pilot", "node {}: SIGKILLed its ranks of the {} worker (relayed)", node, group);
      }
      pause_briefly();
    }
  } catch (const Error&) {
    // The supervisor (or the store's host) is gone: no rank outlives it.
    for (std::size_t i = 0; i < pids.size(); ++i)
      if (!done[i]) ::kill(leaders ? -pids[i] : pids[i], SIGKILL);
    throw;
  }
  return statuses;
}

// A node's agent (LOCAL_RANK 0 on a node other than rank 0's): for each
// worker group it starts this node's ranks, SIGKILLs them on the relayed kill
// or stop, and reports their statuses; then exits with the pilot's verdict.
ExitCode run_agent(const dist::LaunchEnv& launch, dist::Store& store, const PilotOptions& opts) {
  const int node = launch.rank / launch.local_world_size;
  const std::string host = proc::host_name();
  ANCHOR_LOG_INFO("pilot", "{}: agent of node {} ({}): starts this node's ranks of each worker", launch.describe(),
                  node, host);
  auto [which, value] = wait_any(store, {"pilot/exit", "pilot/run_dir"});
  if (which == 0) {
    store.add("pilot/ack", 1);
    return exit_code_from(std::stoi(value));  // the pilot ended before its run directory (a config error): its code
  }
  const auto shared = json::parse(value);
  const std::string run_dir = shared.value("run_dir", "");
  check_run_visible(launch, store, node, host, shared);

  const std::string binary = opts.worker_binary.empty() ? proc::self_exe() : opts.worker_binary;
  proc::become_subreaper();      // a program's ranks' leftovers come here (reap_orphans after each group)
  proc::start_sentinel(binary);  // and if this process is killed, the sentinel ends them
  for (int i = 0;; ++i) {
    auto [w, start] = wait_any(store, {"pilot/exit", "pilot/start/" + std::to_string(i)});
    if (w == 0) break;
    const json what = json::parse(start);
    const JsonFields f(what, "pilot/start/" + std::to_string(i));
    const std::string group = f.str("group");
    const bool program = f.has("program");
    const int base = node * launch.local_world_size;
    const std::vector<pid_t> pids =
        spawn_node_ranks(launch, opts, binary, run_dir, group, base, static_cast<int>(f.integer("port")),
                         program ? f.object("program") : json());
    ANCHOR_LOG_INFO("pilot", "node {}: started ranks {}..{} of the {} worker", node, base,
                    base + launch.local_world_size - 1, group);
    const json statuses = wait_node_ranks(store, pids, node, group, base, program);
    if (program) {  // what the program's ranks left running ends with them, here too
      for (const pid_t pid : pids) ::kill(-pid, SIGKILL);
      proc::reap_orphans(pids);
    }
    store.set(group_key(group, "node/" + std::to_string(node)), statuses.dump());
  }
  return read_verdict(store);
}

}  // namespace

ExitCode run_pilot(const PilotOptions& opts) {
  const auto launch = dist::detect_launch();  // a partial or contradictory environment: exit 2
  if (launch.launcher == dist::Launcher::kNone) return run_supervisor(opts, 0);

  // Under torchrun/srun: the pilot needs fresh worker processes and a real
  // SIGKILL, so the launched processes are supervisors, not workers. Rank 0
  // runs the pilot with as many ranks as the launcher started; on several
  // nodes each other node's LOCAL_RANK 0 is its agent, starting that node's
  // ranks; every other launched process waits for rank 0's exit code and
  // exits with it (docs/distributed.md).
  const bool several_nodes = launch.local_world_size != launch.world_size;
  if (several_nodes && launch.world_size % launch.local_world_size != 0)
    throw Error(ErrorKind::kUsage,
                std::string("anchor pilot under ") + dist::launcher_name(launch.launcher) + " (" + launch.describe() +
                    "): " + std::to_string(launch.world_size) + " ranks do not fill nodes of " +
                    std::to_string(launch.local_world_size) + " evenly",
                "start the same number of ranks on every node");
  config::Config cfg = opts.config ? *opts.config : config::load(opts.config_path, opts.overrides);
  dist::check_nproc_per_node(launch, cfg.distributed.nproc_per_node);
  PilotOptions here = opts;
  here.config = &cfg;
  dist::Store store(launch, cfg.distributed.timeout_s);
  if (launch.rank != 0 && several_nodes && launch.local_rank == 0) return run_agent(launch, store, here);
  if (launch.rank != 0) {
    ANCHOR_LOG_INFO("pilot", "{}: rank 0 runs the pilot with {} ranks; waiting for its verdict", launch.describe(),
                    launch.world_size);
    return read_verdict(store);
  }
  ANCHOR_LOG_INFO("pilot", "{}: this process supervises the pilot{}", launch.describe(),
                  several_nodes ? " over " + std::to_string(launch.world_size / launch.local_world_size) + " nodes"
                                : std::string());
  StoreNodes nodes(store, launch, cfg.distributed.timeout_s);
  if (several_nodes) here.nodes = &nodes;
  // The store lives in this process (unless the agent hosts it): stay until
  // every rank has read the verdict, also when the pilot failed at once (a
  // config error): a rank that connects after the store is gone would retry
  // for the whole distributed.timeout_s.
  auto tell = [&](ExitCode code) {
    store.set("pilot/exit", std::to_string(static_cast<int>(code)));
    const auto t0 = std::chrono::steady_clock::now();
    while (store.add("pilot/ack", 0) < launch.world_size - 1 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(cfg.distributed.timeout_s))
      ::usleep(20000);
  };
  ExitCode code = ExitCode::kRuntime;
  try {
    code = run_supervisor(here, launch.world_size);
  } catch (const Error& e) {
    try {
      tell(exit_code_for(e.kind()));
    } catch (const Error& lost) {  // the pilot's own error is the one to report
      ANCHOR_LOG_WARN("pilot", "could not give the other ranks the verdict: {}", lost.what());
    }
    throw;
  }
  tell(code);
  return code;
}

}  // namespace anchor::pilot
