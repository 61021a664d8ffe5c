#pragma once
// The pilot: a supervisor process and fresh worker processes (DESIGN.md, "The
// pilot"). run_pilot is `anchor pilot`; run_worker is the hidden
// `anchor __worker` the supervisor starts from its own binary.
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

  // `anchor reproduce`: run this config instead of loading config_path, and
  // compare the results with `baseline` (a past report.json) stage by stage.
  const config::Config* config = nullptr;
  const nlohmann::json* baseline = nullptr;
  const nlohmann::json* pinned_manifest = nullptr;  // already pinned for this config: reused, not re-hashed
  nlohmann::json reproduces;           // link to the report reproduced, its drift
  bool reproduce_bitwise = true;       // no drift on CPU: bitwise; else the recorded tolerance
};

// Runs the whole pilot; returns the process exit code (0 passed, 1 a stage
// failed, 2 config, 3 resume mismatch, 130/143 interrupted). Throws Error only
// before the run directory exists (bad config, unwritable output dir).
int run_pilot(const PilotOptions& opts);

// The resume worker also runs the memory probe once its results are written.
enum class WorkerRole { kReference, kResume };

struct WorkerOptions {
  WorkerRole role = WorkerRole::kReference;
  std::string run_dir;  // holds config.json (the effective config) and work/
};

// A worker: reads <run_dir>/config.json, runs its stages, reports events on
// stdout ("@anchor-event {json}" lines) and writes <run_dir>/work/<role>.json.
int run_worker(const WorkerOptions& opts);

}  // namespace anchor::pipeline
