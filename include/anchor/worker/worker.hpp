#pragma once
// The built-in worker: `anchor-torch __worker`, the process the supervisor
// (anchor/pilot/pilot.hpp) starts for worker A and worker B. Needs LibTorch.
#include <string>

#include "anchor/error.hpp"

namespace anchor::worker {

struct WorkerOptions {
  bool use_hash_cache = true;  // the pin's hash cache (worker A, rank 0)
};

// A worker: told its task by the worker protocol's spec (the file
// ANCHOR_PILOT_SPEC names: its role, run and checkpoint directories, the steps
// to save at and stop at; docs/program.md, "The contract"), reads
// <run_dir>/config.json, runs its stages, reports the protocol's lines on
// stdout (each after "@anchor-event ") and writes <run_dir>/work/<role>.json.
// Worker A's rank 0 first pins the run into <run_dir>/manifest.json unless the
// supervisor wrote one: the manifest's libraries and runtime versions are
// those of the process that trains. A failure is also reported as an "error"
// event carrying the message and hint, for the supervisor's report.
ExitCode run_worker(const WorkerOptions& opts);

// `anchor-torch __allreduce-probe`: one rank of the node's all-reduce probe,
// started with torchrun's variables by `anchor preflight` (pilot/preflight.hpp).
// Joins the ranks' process group (the backend as the pilot's ranks choose it:
// dist::choose_backend), times dist::allreduce_probe_sizes() with dist::time_allreduce, and
// rank 0 prints dist::allreduce_json as one line on stdout.
struct AllReduceProbeOptions {
  std::string device = "cpu";    // the config's device; a GPU becomes cuda:<LOCAL_RANK>
  std::string backend = "auto";  // distributed.backend: auto (nccl on a GPU, else gloo), gloo, nccl
  int iters = 5;
  double timeout_s = 60;
};
ExitCode run_allreduce_probe(const AllReduceProbeOptions& opts);

}  // namespace anchor::worker
