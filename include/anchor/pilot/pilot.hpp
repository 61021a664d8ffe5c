#pragma once
// The pilot: a supervisor process and fresh worker processes (docs/pilot.md;
// docs/architecture.md, "A pilot, through the modules"). run_supervisor is
// `anchor pilot` (no LibTorch in it: it runs in the front end); run_pilot adds
// the torchrun/srun case (anchor-torch). The workers it starts are
// worker::run_worker (anchor/worker/worker.hpp).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/run_report/run_report.hpp"

namespace anchor::pilot {

// A rank of a worker group that ran on another node (multi-node pilot).
struct RemoteRank {
  int rank = 0;  // global rank
  int node = 0;  // node index (node 0 is the supervisor's)
  std::string host;
  int status = -1;      // exit status, 128 + signal when killed by one
  bool killed = false;  // the node's agent SIGKILLed it (the relayed kill or a stop)
};

// The other nodes of a multi-node pilot (docs/distributed.md, "The pilot over
// several nodes"). Implemented over the launcher's store in launched.cpp
// (anchor-torch); the supervisor sees only this torch-free interface. Every
// wait is bounded by distributed.timeout_s or by the store's liveness.
class PilotNodes {
 public:
  virtual ~PilotNodes() = default;
  virtual int count() const = 0;                // nodes, the supervisor's included
  virtual int local_world_size() const = 0;     // ranks per node
  virtual std::string master_addr() const = 0;  // node 0's address: the workers' store
  virtual std::string host(int node) const = 0;
  // Publishes the run directory (and checkpoint directory) and has every
  // other node check that it sees them; throws Error (kConfig) naming the
  // node that does not.
  virtual void share_run_dir(const std::string& run_dir, const std::string& ckpt_dir) = 0;
  // Every other node starts its ranks of worker `group` ("reference",
  // "resume") against the store on master_addr():port.
  virtual void start(const std::string& group, int port) = 0;
  // A program pilot's worker `group` ("reference", "resume", "control",
  // "probe-1", ...): every other node starts its ranks of the program, each
  // with `launch` ({"argv", "cwd", "env": the variables added to the node's
  // own environment, ANCHOR_PILOT_SPEC among them}), the rank's launch
  // variables against master_addr():port, and no outer launcher's variables.
  virtual void start_program(const std::string& group, int port, const nlohmann::json& launch) = 0;
  // The kill relayed: every other node SIGKILLs its ranks of `group` at once.
  virtual void kill(const std::string& group) = 0;
  // Waits for every other node's ranks of `group` to end and returns their
  // statuses; stop: the nodes SIGKILL their ranks first (the supervisor's
  // side failed). A node that does not answer in time is an Error (kRuntime).
  virtual std::vector<RemoteRank> collect(const std::string& group, bool stop) = 0;
};

struct PilotOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string run_dir;                 // empty -> <run.output_dir>/<run-id>
  // The checkpoint directory, whatever the config says; empty -> the config's
  // checkpoint.dir (resolved against base_dir), or <run dir>/checkpoints.
  std::string checkpoint_dir;
  // false (`anchor reproduce`): the config's run.output_dir and checkpoint.dir
  // are not used. The run directory is run_dir, else runs/<run-id> under the
  // current directory; the checkpoints go to checkpoint_dir, else
  // <run dir>/checkpoints. A report's config names another machine's paths, or
  // whatever a hostile report wants written (and cleaned: the supervisor
  // removes stale temporaries from the checkpoint directory). The effective
  // config itself is not changed.
  bool use_config_dirs = true;
  // Likewise for the key that signs the report: with use_config_dirs false the
  // config's report.signing_key (a path a report chose) is not read; this one,
  // from the command line, signs (empty: the per-user key; "none": the run is
  // unsigned and says so).
  std::string signing_key;
  std::string junit_path;    // --junit FILE
  bool json_stdout = false;  // --json: the report on stdout
  bool use_hash_cache = true;
  std::string log_level = "info";  // passed on to the workers
  std::string worker_binary;       // the workers' executable (anchor-torch); empty -> this one
  std::string catalog;             // the device catalog; empty -> plan::find_catalog (budget.catalog, ...)

  // `anchor reproduce`: run this config instead of loading config_path, and
  // compare the results with `baseline` (a past report.json) stage by stage.
  const config::Config* config = nullptr;
  const run_report::RunReport* baseline = nullptr;
  // Already pinned for this config (reproduce): written as the run's manifest,
  // not re-hashed. Otherwise worker A pins, in the process that trains.
  const nlohmann::json* pinned_manifest = nullptr;
  nlohmann::json reproduces;           // link to the report reproduced, its drift
  bool reproduce_bitwise = true;       // no drift on CPU: bitwise; else the recorded tolerance
  bool reproduce_allow_drift = false;  // --allow-drift: a re-run that differs from the pins still runs
  // Under a multi-node launch: the other nodes (launched.cpp); null on one node.
  PilotNodes* nodes = nullptr;
};

// Runs the whole pilot; returns the process exit code (0 passed, 1 a stage
// failed, 2 config, 3 resume mismatch, 130/143 interrupted). Throws Error only
// before the run directory exists (bad config, unwritable output dir).
// launched_world > 0: under an external launcher on one node, the number of
// ranks it started (the workers get as many).
ExitCode run_supervisor(const PilotOptions& opts, int launched_world = 0);
// The JUnit XML of a pilot refused before it had a report (what run_pilot or
// the command around it throws: a config or usage error exits 2): one failed
// test case, "config" for a config or usage error and "start" otherwise,
// saying what, why and what to do. `anchor pilot --junit` and `anchor
// reproduce --junit` write it, so CI finds a JUnit file whatever happened.
std::string refusal_junit_xml(const Error& e);
// Whether this process wrote its pilot's JUnit file (publish): a refusal
// thrown after that does not replace it.
bool junit_published();
// run_supervisor, or under torchrun/srun the launched processes' protocol
// around it (docs/distributed.md). Needs LibTorch (c10d's store).
ExitCode run_pilot(const PilotOptions& opts);

}  // namespace anchor::pilot
