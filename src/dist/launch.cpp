// Launch environment: torchrun/TorchElastic, Slurm, or none (docs/distributed.md).
#include "anchor/dist/launch.hpp"

#include <limits>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "anchor/common/faults.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::dist {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& hint) {
  throw Error(ErrorKind::kConfig, "launch environment: " + what, hint);
}

// A whole non-negative decimal integer, or an error naming the variable.
int parse_int(const std::string& name, const std::string& v) {
  std::size_t i = 0;
  long long n = 0;
  if (v.empty()) bad(name + " is set but empty", "unset it or give a non-negative integer");
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9' || n > 100000000)
      bad(name + "='" + v + "' is not a non-negative integer", "fix the launcher's environment");
    n = n * 10 + (v[i] - '0');
  }
  return static_cast<int>(n);
}

// Slurm's task counts may read "2(x3)" (2 tasks on each of 3 nodes) or "2,1":
// the first node's count is the leading integer.
int parse_slurm_count(const std::string& name, const std::string& v) {
  std::size_t end = 0;
  while (end < v.size() && v[end] >= '0' && v[end] <= '9') ++end;
  if (end == 0) bad(name + "='" + v + "' does not start with a task count", "fix the job's task layout");
  return parse_int(name, v.substr(0, end));
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::kNone: return "none";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kSlurm: return "slurm";
  }
  return "?";
}

std::string LaunchEnv::store_prefix() const {
  return agent_store ? "/worker/attempt_" + std::to_string(restart_count) : std::string();
}

std::string LaunchEnv::describe() const {
  std::string s = "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " +
                  std::to_string(local_rank) + "/" + std::to_string(local_world_size) + ") via " +
                  launcher_name(launcher) + ", store ";
  if (meets_in_attempt_dir()) return s + "rank 0's, published in " + attempt_dir + " (not the agent's)";
  s += master_addr + ":" + std::to_string(master_port);
  if (agent_store)
    s += " (agent's, " + store_prefix() + ")";
  else if (store_server())
    s += " (hosted here)";
  return s;
}

std::optional<std::string> torch_version_of_process(int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps) return std::nullopt;
  std::set<std::filesystem::path> seen;
  static const std::regex kVersion(R"(^__version__\s*=\s*['"]([^'"]{1,64})['"])");
  std::string line;
  for (int lines = 0; lines < 100000 && std::getline(maps, line); ++lines) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    // A mapped file under a package directory named torch: .../torch/lib/libtorch_cpu.so, .../torch/_C.*.so.
    for (std::filesystem::path dir = std::filesystem::path(line.substr(slash)).parent_path(); dir.has_relative_path();
         dir = dir.parent_path()) {
      if (dir.filename() != "torch") continue;
      if (!seen.insert(dir).second) break;
      std::ifstream version(dir / "version.py");
      std::string v;
      for (int n = 0; n < 200 && std::getline(version, v); ++n) {
        std::smatch m;
        if (std::regex_search(v, m, kVersion)) return m[1].str();
      }
      break;
    }
  }
  return std::nullopt;
}

std::string store_protocol_mismatch(const std::string& ours, const std::string& theirs) {
  const auto major = [](const std::string& v) { return v.substr(0, v.find('.')); };
  if (major(ours) == major(theirs)) return "";
  return "this anchor's LibTorch " + ours + " and the agent's torch " + theirs +
         " speak different c10d store protocols (a 2.x store waits for a handshake a 1.x client never sends; a "
         "1.x store reads 2.x's handshake as a command and drops the connection)";
}

EnvLookup process_env() {
  return [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup map_env(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

namespace {

void check_world(LaunchEnv& e, const std::string& rank_v, const std::string& world_v, const std::string& local_rank_v,
                 const std::string& local_world_v) {
  if (e.world_size < 1) bad(world_v + " is 0", "a world has at least one rank");
  if (e.rank >= e.world_size)
    bad(rank_v + "=" + std::to_string(e.rank) + " is not below " + world_v + "=" + std::to_string(e.world_size),
        "ranks are 0 .. world size - 1; the launcher's variables contradict each other");
  if (e.local_world_size < 1) bad(local_world_v + " is 0", "a node runs at least one rank");
  if (e.local_world_size > e.world_size)
    bad(local_world_v + "=" + std::to_string(e.local_world_size) + " exceeds " + world_v + "=" +
            std::to_string(e.world_size),
        "a node cannot hold more ranks than the world");
  if (e.local_rank >= e.local_world_size)
    bad(local_rank_v + "=" + std::to_string(e.local_rank) + " is not below " + local_world_v + "=" +
            std::to_string(e.local_world_size),
        "local ranks are 0 .. ranks per node - 1");
  if (e.local_rank > e.rank)
    bad(local_rank_v + "=" + std::to_string(e.local_rank) + " exceeds " + rank_v + "=" + std::to_string(e.rank),
        "a local rank is never above the global rank");
}

void read_master(LaunchEnv& e, const EnvLookup& env, const std::optional<std::string>& fallback_addr,
                 const std::optional<int>& fallback_port, const std::string& who) {
  auto addr = env("MASTER_ADDR");
  auto port = env("MASTER_PORT");
  if (addr && !addr->empty())
    e.master_addr = *addr;
  else if (fallback_addr && !fallback_addr->empty())
    e.master_addr = *fallback_addr;
  else if (e.distributed())
    bad(who + " gives a world of " + std::to_string(e.world_size) + " ranks but no MASTER_ADDR",
        "export MASTER_ADDR (the host of rank 0) for every rank");
  if (port)
    e.master_port = parse_int("MASTER_PORT", *port);
  else if (fallback_port)
    e.master_port = *fallback_port;
  else if (e.distributed())
    bad(who + " gives a world of " + std::to_string(e.world_size) + " ranks but no MASTER_PORT",
        "export MASTER_PORT (a free TCP port on rank 0's host) for every rank");
  if (e.master_port < 1 || e.master_port > 65535)
    bad("MASTER_PORT=" + std::to_string(e.master_port) + " is not a TCP port", "use 1..65535");
}

// srun's variables (SLURM_PROCID and SLURM_NTASKS are set, one of them at least).
void read_slurm(LaunchEnv& e, const EnvLookup& env, const std::optional<std::string>& procid,
                const std::optional<std::string>& ntasks) {
  e.launcher = Launcher::kSlurm;
  if (!procid || !ntasks)
    bad(std::string(procid ? "SLURM_PROCID" : "SLURM_NTASKS") + " is set but " +
            (procid ? "SLURM_NTASKS" : "SLURM_PROCID") + " is not",
        "run under srun (it sets both), or unset the partial variables");
  e.rank = parse_int("SLURM_PROCID", *procid);
  e.world_size = parse_int("SLURM_NTASKS", *ntasks);
  auto localid = env("SLURM_LOCALID");
  if (!localid && e.world_size > 1)
    bad("SLURM_PROCID/SLURM_NTASKS give " + std::to_string(e.world_size) + " tasks but SLURM_LOCALID is unset",
        "run under srun, which sets SLURM_LOCALID");
  e.local_rank = localid ? parse_int("SLURM_LOCALID", *localid) : 0;
  if (auto per = env("SLURM_NTASKS_PER_NODE"))
    e.local_world_size = parse_slurm_count("SLURM_NTASKS_PER_NODE", *per);
  else if (auto tpn = env("SLURM_TASKS_PER_NODE"))
    e.local_world_size = parse_slurm_count("SLURM_TASKS_PER_NODE", *tpn);
  else if (e.world_size > 1)
    bad("Slurm gives " + std::to_string(e.world_size) +
            " tasks but neither SLURM_NTASKS_PER_NODE nor "
            "SLURM_TASKS_PER_NODE",
        "run under srun, or pass --ntasks-per-node");
  check_world(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
  // The store port: MASTER_PORT, else one derived from the job id so that two
  // jobs sharing a node seldom collide (the launch id catches it when they
  // do), in 20000..29999: below Linux's ephemeral range (32768..60999 by
  // default), where any outgoing connection on the node may already hold it
  // as its local port.
  std::optional<int> port;
  if (auto job = env("SLURM_JOB_ID")) port = kSlurmPortBase + parse_int("SLURM_JOB_ID", *job) % kSlurmPortSpan;
  read_master(e, env, env("SLURM_LAUNCH_NODE_IPADDR"), port, "Slurm's environment");
  if (auto job = env("SLURM_JOB_ID")) {
    auto step = env("SLURM_STEP_ID");
    const bool number =
        step && !step->empty() && step->size() <= 10 && step->find_first_not_of("0123456789") == std::string::npos;
    e.launch_id = "Slurm job " + *job + " step " + (number ? *step : std::string("?"));
  }
}

}  // namespace

LaunchEnv detect_launch(const EnvLookup& env) {
  LaunchEnv e;
  auto rank = env("RANK"), world = env("WORLD_SIZE");
  auto local_rank = env("LOCAL_RANK"), local_world = env("LOCAL_WORLD_SIZE");
  if (rank || world || local_rank || local_world) {
    e.launcher = Launcher::kTorchrun;
    if (!rank || !world) {
      std::string missing = !rank ? "RANK" : "WORLD_SIZE";
      std::string present = rank ? "RANK" : world ? "WORLD_SIZE" : local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE";
      bad(present + " is set but " + missing + " is not",
          "launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
          "MASTER_PORT) or unset the partial variables");
    }
    e.rank = parse_int("RANK", *rank);
    e.world_size = parse_int("WORLD_SIZE", *world);
    // A hand-made single-node launch may omit the local pair: then local = global.
    if (local_rank.has_value() != local_world.has_value())
      bad(std::string(local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE") + " is set but " +
              (local_rank ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK") + " is not",
          "set both or neither (neither: one node)");
    e.local_rank = local_rank ? parse_int("LOCAL_RANK", *local_rank) : e.rank;
    e.local_world_size = local_world ? parse_int("LOCAL_WORLD_SIZE", *local_world) : e.world_size;
    check_world(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    read_master(e, env, std::nullopt, std::nullopt, "torchrun's environment");
    if (auto a = env("TORCHELASTIC_USE_AGENT_STORE")) {
      if (*a == "True" || *a == "true" || *a == "1")
        e.agent_store = true;
      else if (*a == "False" || *a == "false" || *a == "0" || a->empty())
        e.agent_store = false;
      else
        bad("TORCHELASTIC_USE_AGENT_STORE='" + *a + "' is neither True nor False", "fix the launcher's environment");
    }
    if (auto r = env("TORCHELASTIC_RESTART_COUNT")) e.restart_count = parse_int("TORCHELASTIC_RESTART_COUNT", *r);
    // .../attempt_<n>/<local rank>/error.json: the attempt's directory is two up.
    if (auto f = env("TORCHELASTIC_ERROR_FILE"); f && !f->empty()) {
      const std::filesystem::path dir = std::filesystem::path(*f).parent_path().parent_path();
      if (dir.is_absolute() && dir.has_relative_path()) e.attempt_dir = dir.string();
    }
    if (auto id = env("TORCHELASTIC_RUN_ID"); id && !id->empty()) e.launch_id = "torchrun run " + *id;
    return e;
  }

  auto procid = env("SLURM_PROCID"), ntasks = env("SLURM_NTASKS");
  if (procid || ntasks) read_slurm(e, env, procid, ntasks);
  return e;  // Slurm's, or a single process
}

bool port_is_free(int port, std::uint32_t addr) {
  const fs::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return ::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

namespace {

// The lowest port of the kernel's ephemeral range, from which it picks the
// local port of an outgoing connection (32768 unless the node changed it).
int ephemeral_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  return f >> lo >> hi && lo > 0 ? lo : 32768;
}

int free_port_on(std::uint32_t addr, const char* what) {
  // A port below the ephemeral range, tried from a random place: between this
  // check and the store's bind no outgoing connection can take it as its
  // local port, which a port the kernel hands out for port 0 may be (seen as
  // EADDRINUSE when tests run side by side); and two launchers started at
  // once try different ports. Kept apart from Slurm's job-id ports. The
  // kernel's choice is the fallback when that range has no room.
  constexpr int kLow = 10000;
  const int high = std::min(kSlurmPortBase, ephemeral_low());
  if (high - kLow >= 1000) {
    const int span = high - kLow;
    const int start = static_cast<int>(std::random_device{}() % static_cast<unsigned>(span));
    for (int i = 0; i < 256; ++i)
      if (const int port = kLow + (start + i) % span; port_is_free(port, addr)) return port;
  }
  const fs::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw io_error("socket", what, errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  socklen_t n = sizeof a;
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &n) != 0)
    throw io_error("bind", std::string(what) + ":0", errno);
  return ntohs(a.sin_port);
}

}  // namespace

int free_loopback_port() { return free_port_on(INADDR_LOOPBACK, "127.0.0.1"); }
int free_port() { return free_port_on(INADDR_ANY, "0.0.0.0"); }

std::map<std::string, std::string> self_launch_env(int rank, int nproc, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(nproc)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
          {"TORCHELASTIC_RESTART_COUNT", "0"}};
}

const std::vector<std::string>& outer_launch_variables() {
  static const std::vector<std::string> kVars = {
      // srun's task geometry (Slurm's job-level variables stay: SLURM_JOB_ID, ...)
      "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
      "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES",
      "SLURM_STEP_NODELIST", "SLURM_STEPID", "SLURM_STEP_ID", "SLURM_GTIDS",
      // torchrun's, besides those self_launch_env sets
      "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_ERROR_FILE",
      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_SIGNALS_TO_HANDLE"};
  return kVars;
}

std::map<std::string, std::string> placed_launch_env(int rank, int world, int local_rank, int local_world,
                                                     const std::string& addr, int port) {
  auto e = self_launch_env(rank, world, port);
  e["LOCAL_RANK"] = std::to_string(local_rank);
  e["LOCAL_WORLD_SIZE"] = std::to_string(local_world);
  e["MASTER_ADDR"] = addr;
  return e;
}

void check_nproc_per_node(const LaunchEnv& env, int nproc_per_node) {
  if (env.launcher == Launcher::kNone || nproc_per_node == 1) return;
  if (nproc_per_node != env.local_world_size)
    throw Error(ErrorKind::kConfig,
                "distributed.nproc_per_node is " + std::to_string(nproc_per_node) + " but " +
                    launcher_name(env.launcher) + " started " + std::to_string(env.local_world_size) +
                    " ranks on this node",
                "under an external launcher leave distributed.nproc_per_node at 1 (the launcher decides) or "
                "make it match");
}

std::string rank_device(const std::string& device, const LaunchEnv& env, int visible_gpus) {
  if (!env.distributed() || device == "cpu") return device;
  const bool gpu = device == "cuda" || device == "rocm" || (device == "auto" && visible_gpus > 0);
  if (!gpu) {
    if (device.rfind("cuda:", 0) == 0)
      throw Error(ErrorKind::kConfig,
                  "device " + device + " with " + std::to_string(env.world_size) +
                      " ranks would put every rank of this node on one GPU",
                  "use device: cuda; each rank then takes cuda:<LOCAL_RANK>");
    return device;  // auto without a GPU: the CPU
  }
  // visible_gpus 0 with device cuda: resolve_device says this LibTorch sees none.
  if (visible_gpus > 0 && visible_gpus != env.local_world_size)
    throw Error(ErrorKind::kConfig,
                std::to_string(env.local_world_size) + " ranks on this node but " + std::to_string(visible_gpus) +
                    " visible GPU" + (visible_gpus == 1 ? "" : "s") + ": anchor runs one process per device",
                "start as many ranks per node as GPUs (--nproc-per-node " + std::to_string(visible_gpus) +
                    ", torchrun --nproc_per_node " + std::to_string(visible_gpus) +
                    "), or choose the GPUs with CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES");
  return "cuda:" + std::to_string(env.local_rank);
}

std::string choose_backend(const std::string& configured, bool on_gpu, bool nccl_built,
                           const std::string& torch_version) {
  if (configured == "gloo") return "gloo";
  if (configured == "auto") return on_gpu && nccl_built ? "nccl" : "gloo";
  if (configured != "nccl")
    throw Error(ErrorKind::kConfig, "distributed.backend '" + configured + "' is not one of auto, gloo, nccl");
  if (!on_gpu)
    throw Error(ErrorKind::kConfig, "distributed.backend nccl needs a GPU, and this rank has none visible",
                "use distributed.backend: auto or gloo on CPU");
  if (!nccl_built)
    throw Error(ErrorKind::kConfig,
                "distributed.backend nccl: this anchor-torch was built against a LibTorch (" + torch_version +
                    ") without NCCL/RCCL",
                "build anchor on the GPU node against its CUDA/ROCm LibTorch (cmake -DANCHOR_NCCL=ON makes a "
                "missing NCCL a build error; docs/development.md), or use distributed.backend: gloo");
  return "nccl";
}

DistFault dist_fault(const EnvLookup& env) {
  DistFault f;
  const auto v = env("ANCHOR_DIST_FAULT");
  if (!v || v->empty()) return f;
  // sigkill:<rank>:<step>, sigkill_save:<rank>:<step>, sigkill_rendezvous:<rank> or sigkill_probe:<rank>
  // (src/common/faults.cpp)
  const auto items = faults::parse("ANCHOR_DIST_FAULT", *v);
  if (items.empty()) return f;
  const auto& item = items.front();
  f.point = item.point == "sigkill"         ? DistFault::Point::kStep
            : item.point == "sigkill_save"  ? DistFault::Point::kSave
            : item.point == "sigkill_probe" ? DistFault::Point::kProbe
                                            : DistFault::Point::kRendezvous;
  if (item.args[0] > std::numeric_limits<int>::max())
    throw Error(
        ErrorKind::kUsage,
        "ANCHOR_DIST_FAULT='" + printable(*v) + "': rank " + std::to_string(item.args[0]) + " is past any world size",
        "name a rank of the worker");
  f.rank = static_cast<int>(item.args[0]);
  f.step = item.args.size() > 1 ? item.args[1] : -1;
  return f;
}

}  // namespace anchor::dist
