#pragma once
// The pilot: a supervisor process and fresh worker processes (DESIGN.md, "The
// pilot"). run_supervisor is `anchor pilot` (no LibTorch in it: it runs in the
// front end); run_pilot adds the torchrun/srun case (anchor-torch);
// run_worker is the hidden `anchor-torch __worker` the supervisor starts.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/config/config.hpp"

namespace anchor::pipeline {

struct PilotOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string run_dir;                 // empty -> <run.output_dir>/<run-id>
  std::string junit_path;              // --junit FILE
  bool json_stdout = false;            // --json: the report on stdout
  bool use_hash_cache = true;
  std::string log_level = "info";      // passed on to the workers
  std::string worker_binary;           // the workers' executable (anchor-torch); empty -> this one

  // `anchor reproduce`: run this config instead of loading config_path, and
  // compare the results with `baseline` (a past report.json) stage by stage.
  const config::Config* config = nullptr;
  const nlohmann::json* baseline = nullptr;
  // Already pinned for this config (reproduce): written as the run's manifest,
  // not re-hashed. Otherwise worker A pins, in the process that trains.
  const nlohmann::json* pinned_manifest = nullptr;
  nlohmann::json reproduces;           // link to the report reproduced, its drift
  bool reproduce_bitwise = true;       // no drift on CPU: bitwise; else the recorded tolerance
};

// Runs the whole pilot; returns the process exit code (0 passed, 1 a stage
// failed, 2 config, 3 resume mismatch, 130/143 interrupted). Throws Error only
// before the run directory exists (bad config, unwritable output dir).
// launched_world > 0: under an external launcher on one node, the number of
// ranks it started (the workers get as many).
int run_supervisor(const PilotOptions& opts, int launched_world = 0);
// run_supervisor, or under torchrun/srun the launched processes' protocol
// around it (docs/distributed.md). Needs LibTorch (c10d's store).
int run_pilot(const PilotOptions& opts);

// The resume worker also runs the memory probe once its results are written.
enum class WorkerRole { kReference, kResume };

struct WorkerOptions {
  WorkerRole role = WorkerRole::kReference;
  std::string run_dir;        // holds config.json (the effective config) and work/
  bool use_hash_cache = true; // the pin's hash cache (worker A, rank 0)
};

// A worker: reads <run_dir>/config.json, runs its stages, reports events on
// stdout ("@anchor-event {json}" lines) and writes <run_dir>/work/<role>.json.
// Worker A's rank 0 first pins the run into <run_dir>/manifest.json unless the
// supervisor wrote one: the manifest's libraries and runtime versions are
// those of the process that trains. A failure is also reported as an "error"
// event carrying the message and hint, for the supervisor's report.
int run_worker(const WorkerOptions& opts);

}  // namespace anchor::pipeline
