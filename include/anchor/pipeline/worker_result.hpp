#pragma once
// What a built-in worker reports to the supervisor: one file per process,
// work/<role>.json (rank 0) or work/<role>-rank<r>.json (pipeline/work_files.hpp),
// written atomically when the worker has its results. This struct is the
// contract: the worker fills it and writes it with to_json, the supervisor
// reads it with read_worker_result, which checks the format version, the
// role and every field the role must carry, so a worker and a supervisor
// from different builds fail with a message that says so, never with a
// JSON type error deep in the comparison. Schema: docs/worker-result.schema.json.
//
// Stage records and a few nested sections (the model's shape, the precision
// verdict, memory readings, the per-rank share of the state) pass through to
// report.json as written; their fields are documented in docs/report.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/train/records.hpp"

namespace anchor::pipeline {

inline constexpr const char* kWorkerResultFormat = "anchor.worker-result/v1";

struct WorkerResult {
  std::string role;  // reference | resume | probe
  std::int64_t pid = 0;
  int rank = 0, world_size = 1;
  std::string backend;                             // with several ranks: the process group's (gloo, nccl)
  std::int64_t rss_bytes = 0, peak_rss_bytes = 0;  // the process, when it wrote the file
  // Stage records in order: {"stage", "status", "seconds", "figures"} (docs/report.md).
  nlohmann::json stages = nlohmann::json::array();

  // reference (worker A)
  nlohmann::json start;  // where it started: {"from": "init"} or the restored checkpoint (docs/pilot.md)
  nlohmann::json model;  // parameters, shape, flops_per_token, attention: report measurements.model
  bool loss_scaler_enabled = false;
  nlohmann::json precision;                        // the precision stage's verdict (docs/precision.md); null in fp32
  std::vector<train::StepRecord> train_steps;      // the K steps; the last is the measured step
  std::vector<train::StepRecord> reference_steps;  // the R steps after the save
  nlohmann::json step_memory;                      // the measured step's memory reading (measure::memory_json)
  train::StateBytes state_bytes;
  nlohmann::json sharding;  // several ranks: this rank's share next to DDP's (Trainer::sharding)
  double matmul_flops = 0;  // a measured 512x512 matmul on the device, FLOP/s
  std::optional<std::int64_t> saved_step;
  std::optional<train::StateDigest> saved_state;

  // resume (worker B)
  std::optional<std::int64_t> restored_step;
  std::string restored_dir;
  nlohmann::json skipped = nlohmann::json::array();  // [{"dir", "reason"}]: checkpoints restore passed over
  std::optional<train::StateDigest> restored_state;
  nlohmann::json rng_restore;                   // Trainer::rng_restore
  std::vector<train::StepRecord> resume_steps;  // the R steps after the restore

  // both: the eval (before the save, after the restore) and the state after the R steps
  std::optional<double> eval_loss;
  std::optional<train::StateDigest> final_state;

  // probe (worker B after its results, a process of its own)
  nlohmann::json memory_points;             // [{"micro_batch", "seq_len", "peak_allocated_bytes", ...}]
  nlohmann::json activation_checkpointing;  // null unless train.activation_checkpointing

  nlohmann::json to_json() const;
  // Every field the role needs, typed; throws std::invalid_argument naming the
  // first missing or mistyped one by its path.
  static WorkerResult from_json(const nlohmann::json& j);
};

// work/<role>.json read back: Error (kRuntime) naming the file and the field
// when it is missing, unreadable, of another format version or another role.
WorkerResult read_worker_result(const std::string& path, const std::string& role);

}  // namespace anchor::pipeline
