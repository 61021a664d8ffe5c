#pragma once
// What a built-in worker reports to the supervisor: one file per process,
// work/<role>.json (rank 0) or work/<role>-rank<r>.json (protocol/work_files.hpp),
// written atomically when the worker has its results. This struct is the
// contract: the worker fills it and writes it with to_json, the supervisor
// reads it with read_worker_result, which checks the format version, the
// role and every field the role must carry, so a worker and a supervisor
// from different builds fail with a message that says so, never with a
// JSON type error deep in the comparison. Schema: docs/worker-result.schema.json.
//
// Every section the supervisor reads a field of is a struct of its own with
// its serialiser and parser (ModelInfo, MemoryReading, MemoryPoint,
// SkippedDir; the steps and digests in train/records.hpp). Four documents pass
// through to report.json as written, each made by the one function that owns
// its meaning and checked here only for being an object: the stage records'
// figures, the precision verdict (Trainer::validate_precision,
// docs/precision.md), the per-rank share of the state (Trainer::sharding) and
// the RNG restore (Trainer::rng_restore); and worker A's `start`, of which the
// supervisor reads `from` and `rng_restore` (docs/pilot.md).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/verified_dir.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/train/records.hpp"

namespace anchor::protocol {

inline constexpr const char* kWorkerResultFormat = "anchor.worker-result/v1";

// The model as worker A built it: report.json measurements.model.
struct ModelInfo {
  std::int64_t parameters = 0;
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0, seq_len = 0;
  double flops_per_token = 0;
  std::string source;                // the config's model.source
  std::string flops_per_token_note;  // how flops_per_token was counted
  std::string attention;             // the attention kernel the model runs
  nlohmann::json to_json() const;
  static ModelInfo from_json(const nlohmann::json& j, const std::string& where);
};

// A memory reading (a stage's, the measured step's): the tensors' figures and
// the process's, as measure:: reads them; serialised as measure::memory_json.
struct MemoryReading {
  measure::TensorMemory tensors;
  measure::ProcMemory process;
  std::string device_report;  // the vendor tool's line for the device (measure::device_smi_report); "" when none
  nlohmann::json to_json() const;
  static MemoryReading from_json(const nlohmann::json& j, const std::string& where);
};

// A point of the plan's memory model: the peak of one step at a shape
// (report.json measurements.memory.points).
struct MemoryPoint {
  std::int64_t micro_batch = 0, seq_len = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = -1;  // -1 where the device has no caching allocator
  train::StateBytes state_bytes;
  std::string from;               // reference (worker A's measured step) | probe
  std::optional<double> seconds;  // the probe's step: data wait and compute
  nlohmann::json to_json() const;
  static MemoryPoint from_json(const nlohmann::json& j, const std::string& where);
};

// A checkpoint directory a restore passed over, and why.
struct SkippedDir {
  std::string dir, reason;
  nlohmann::json to_json() const;
  static SkippedDir from_json(const nlohmann::json& j, const std::string& where);
};

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
  ModelInfo model;
  bool loss_scaler_enabled = false;
  nlohmann::json precision;                        // the precision stage's verdict (docs/precision.md); null in fp32
  std::vector<train::StepRecord> train_steps;      // the K steps; the last is the measured step
  std::vector<train::StepRecord> reference_steps;  // the R steps after the save
  MemoryReading step_memory;                       // the measured step's
  train::StateBytes state_bytes;
  nlohmann::json sharding;  // several ranks: this rank's share next to DDP's (Trainer::sharding)
  double matmul_flops = 0;  // a measured 512x512 matmul on the device, FLOP/s
  std::optional<std::int64_t> saved_step;
  std::optional<train::StateDigest> saved_state;

  // resume (worker B)
  std::optional<std::int64_t> restored_step;
  std::string restored_dir;
  // The restored directory as its complete verification saw it: the
  // supervisor lists and signs it without reading it again while it still
  // matches (checkpoint::VerifiedDir). Empty: not seen whole; read again.
  checkpoint::VerifiedDir restored_seen;
  std::vector<SkippedDir> skipped;  // checkpoints restore passed over
  std::optional<train::StateDigest> restored_state;
  nlohmann::json rng_restore;                   // Trainer::rng_restore
  std::vector<train::StepRecord> resume_steps;  // the R steps after the restore

  // both: the eval (before the save, after the restore) and the state after the R steps
  std::optional<double> eval_loss;
  std::optional<train::StateDigest> final_state;

  // probe (worker B after its results, a process of its own)
  std::vector<MemoryPoint> memory_points;
  nlohmann::json activation_checkpointing;  // null unless train.activation_checkpointing

  nlohmann::json to_json() const;
  // Every field the role needs, typed; throws std::invalid_argument naming the
  // first missing or mistyped one by its path.
  static WorkerResult from_json(const nlohmann::json& j);
};

// work/<role>.json read back: Error (kRuntime) naming the file and the field
// when it is missing, unreadable, of another format version or another role.
WorkerResult read_worker_result(const std::string& path, const std::string& role);

}  // namespace anchor::protocol
