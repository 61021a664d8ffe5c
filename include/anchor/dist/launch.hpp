#pragma once
// Where this process sits in a multi-process run: rank, world, the rendezvous
// address. Read from the launcher's environment (torchrun/TorchElastic or
// Slurm's srun) or made by the supervisor's own self-launch. Torch-free.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anchor::dist {

enum class Launcher {
  kNone,      // a single process: no launcher variables at all
  kTorchrun,  // RANK/WORLD_SIZE/... (torchrun, TorchElastic, or anchor's self-launch)
  kSlurm,     // SLURM_PROCID/SLURM_NTASKS/... (srun)
};
const char* launcher_name(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // TORCHELASTIC_USE_AGENT_STORE=True: the torchrun agent already hosts the
  // TCPStore on MASTER_ADDR:MASTER_PORT; every rank is a client and keys live
  // under "/worker/attempt_<restart_count>".
  bool agent_store = false;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  // torchrun's directory for this attempt of the launch (.../attempt_<n>, the
  // grandparent of TORCHELASTIC_ERROR_FILE): made afresh by the agent for each
  // attempt, one per node, seen by every rank on it. "" when not set.
  std::string attempt_dir;
  // What names this launch among others that may share its store's port:
  // "Slurm job 12345 step 0", "torchrun run <TORCHELASTIC_RUN_ID>"; "" when
  // the launcher gives nothing. Two Slurm jobs on one node whose ids differ
  // by a multiple of kSlurmPortSpan derive the same port.
  std::string launch_id;

  bool distributed() const { return world_size > 1; }
  // Whether the launched processes of `anchor pilot` meet through a store rank
  // 0 hosts on a free port and publishes in attempt_dir, instead of the
  // agent's store (docs/distributed.md, "Under torchrun"): one node under
  // torchrun's agent store. The agent's store speaks the wire protocol of the
  // agent's torch, which need not be this build's LibTorch.
  bool meets_in_attempt_dir() const { return agent_store && local_world_size == world_size && !attempt_dir.empty(); }
  // Whether this process hosts the TCPStore (rank 0 unless the agent does).
  bool store_server() const { return !agent_store && rank == 0; }
  // The PrefixStore prefix every key goes under ("" when none).
  std::string store_prefix() const;
  // "rank 1/2 (local 1/2) via torchrun, store 127.0.0.1:29500 (agent, /worker/attempt_0)"
  std::string describe() const;
};

// The torch version process `pid` has loaded: the `__version__` in the
// version.py of the torch package it has mapped (/proc/<pid>/maps), such as
// "2.15.0+cu132"; nullopt when it has none mapped or it cannot be read. For
// the torchrun agent, which hosts the store its ranks use.
std::optional<std::string> torch_version_of_process(int pid);

// Why a c10d store client of LibTorch `ours` cannot use a store hosted by torch
// `theirs` ("" when it can): their major versions differ. 2.x's store expects
// a handshake 1.x's client never sends, and 1.x's reads 2.x's as a command.
std::string store_protocol_mismatch(const std::string& ours, const std::string& theirs);

// Looks a variable up: nullopt when unset. The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();
EnvLookup map_env(const std::map<std::string, std::string>& vars);

// Under Slurm without MASTER_PORT, the store listens on
// kSlurmPortBase + SLURM_JOB_ID % kSlurmPortSpan: 20000..29999, below Linux's
// ephemeral ports (32768 and up), which outgoing connections take.
inline constexpr int kSlurmPortBase = 20000;
inline constexpr int kSlurmPortSpan = 10000;

// Detects the launcher. torchrun's variables win over Slurm's (`srun torchrun …`
// sets both; the ranks are torchrun's). Throws Error (kConfig) naming the
// variables when the environment is partial (RANK without WORLD_SIZE, a
// multi-rank world without MASTER_ADDR/MASTER_PORT) or contradictory (RANK >=
// WORLD_SIZE, LOCAL_WORLD_SIZE > WORLD_SIZE, a non-integer, a bad port, an
// unrecognised TORCHELASTIC_USE_AGENT_STORE).
LaunchEnv detect_launch(const EnvLookup& env);
inline LaunchEnv detect_launch() { return detect_launch(process_env()); }

// A TCP port free on the loopback now, for the caller's store to bind a moment
// later: one in 10000..19999 (below the ephemeral ports that outgoing
// connections take, and apart from Slurm's job-id ports), picked at random,
// else one the kernel hands out. Throws Error (kIo) when no socket can be bound.
int free_loopback_port();
// The same, free on every interface: for a store that ranks on other hosts
// must reach (the multi-node pilot's workers).
int free_port();
// Whether a TCP listener could bind `port` on `addr` (host byte order,
// INADDR_ANY by default) now. No SO_REUSEADDR: a port in TIME_WAIT counts as taken.
bool port_is_free(int port, std::uint32_t addr = 0);

// The variables the supervisor gives rank `rank` of `nproc` ranks it starts
// itself on this node (torchrun's names, rank 0 hosting the store on `port`).
std::map<std::string, std::string> self_launch_env(int rank, int nproc, int port);
// The variables an outer launcher (torchrun's agent, srun) gives each of the
// processes it starts that would be wrong in a process anchor starts itself
// with self_launch_env/placed_launch_env: the outer task's place (SLURM_PROCID,
// SLURM_NTASKS, ..., GROUP_RANK, ROLE_RANK, ...) and torchrun's error file of
// the launched anchor. A program reading them would take every rank for rank
// 0 of the outer launch (Lightning looks for Slurm's first) or write its
// error into anchor's file. Removed from what the child inherits (SpawnOptions::unset).
const std::vector<std::string>& outer_launch_variables();

// The same variables for a rank placed by a multi-node launch: global `rank` of
// `world`, `local_rank` of `local_world` on its node, the store on addr:port.
std::map<std::string, std::string> placed_launch_env(int rank, int world, int local_rank, int local_world,
                                                     const std::string& addr, int port);

// Settles the world from the launch and the config's distributed.nproc_per_node:
// under an external launcher nproc_per_node must be 1 (the default) or equal
// LOCAL_WORLD_SIZE; throws Error (kConfig) otherwise.
void check_nproc_per_node(const LaunchEnv& env, int nproc_per_node);

// The device a rank trains on (docs/distributed.md, "GPUs and NCCL"). One
// process per device: with several ranks, `cuda`/`rocm` (and `auto` when GPUs
// are visible) become `cuda:<LOCAL_RANK>`, and the ranks on this node must
// equal the visible GPUs. A single process keeps `device` as it is. Throws
// Error (kConfig) for a count that does not match and for `cuda:N` with
// several ranks (every rank would share one GPU).
std::string rank_device(const std::string& device, const LaunchEnv& env, int visible_gpus);

// The collective backend the ranks use: "gloo" or "nccl" (RCCL in a ROCm
// LibTorch, under the same name). `auto`: nccl on a GPU when this build has
// it, else gloo. Throws Error (kConfig) for nccl without a GPU or without
// NCCL in this build.
std::string choose_backend(const std::string& configured, bool on_gpu, bool nccl_built,
                           const std::string& torch_version);

// The test seam ANCHOR_DIST_FAULT (docs/distributed.md): one rank SIGKILLs
// itself at a chosen point, so the tests can show how its peers and the
// supervisor end.
//   sigkill:<rank>:<step>          in that step, after backward, before the all-reduce
//   sigkill_save:<rank>:<step>     in that step's save, once its files are written
//   sigkill_rendezvous:<rank>      before it joins the process group
//   sigkill_probe:<rank>           a rank of the preflight's all-reduce probe, before it joins
// The preflight's probe ranks get the variable only in its last form: the
// pilot's own faults are for its workers.
struct DistFault {
  enum class Point { kNone, kStep, kSave, kRendezvous, kProbe };
  Point point = Point::kNone;
  int rank = -1;
  std::int64_t step = -1;
  bool at(Point p, int r, std::int64_t s = -1) const { return point == p && rank == r && (s < 0 || step == s); }
};
// Reads ANCHOR_DIST_FAULT from `env`; unset is Point::kNone. Throws Error
// (kUsage) for anything else than the forms above: a typo must not make a
// fault test pass without its fault.
DistFault dist_fault(const EnvLookup& env);
inline DistFault dist_fault() { return dist_fault(process_env()); }

}  // namespace anchor::dist
