#pragma once
// What the trainer reports about a step and about its state, as plain structs
// without torch: the worker writes them (protocol/worker_result.hpp) and the
// supervisor, which never loads LibTorch, reads them back.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::train {

struct StepRecord {
  std::int64_t step = 0;  // the optimizer step this record is for, counted from 1 (checkpoint step-N is after it)
  double loss = 0;        // mean over micro-steps
  double grad_norm = 0;   // before clipping
  double lr = 0;
  std::string batch_digest;    // SHA-256 of the step's input tokens (the data cursor, checked)
  double data_wait_s = 0;      // assembling batches
  double compute_s = 0;        // forward, backward, optimizer
  double comm_s = 0;           // DDP: gradient + loss all-reduce (0 on one rank)
  double replica_check_s = 0;  // DDP: the parameter digest exchange after the step (0 in the pilot: it checks at saves)
  std::int64_t tokens = 0;
  double loss_scale = 1;       // the loss scale this step's backward used (1: no scaling)
  bool skipped = false;        // the loss scaler skipped the optimizer step (inf/NaN gradient)
  std::string nonfinite_grad;  // the first parameter whose gradient was inf/NaN (skipped, or applied without a scaler)

  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming the first missing or mistyped field,
  // its path starting at `where` (e.g. "train_steps[2]").
  static StepRecord from_json(const nlohmann::json& j, const std::string& where);
};

// Steps as a JSON array of StepRecord::to_json.
nlohmann::json steps_json(const std::vector<StepRecord>& steps);

// The SHA-256 (hex) of a tensor's data bytes, by StateDigest::tensors key,
// where a save or a verified restore already hashed them (Trainer::digest).
using KnownDigests = std::map<std::string, std::string>;

// How StateDigest's tensor digests are made (docs/report.md, "State digests"):
// v2, SHA-256 over the dtype, rank, shape and the SHA-256 of the data (the
// checkpoint manifest's per-tensor digest, reused); v1 (reports before it),
// SHA-256 over the dtype, rank, shape and the data itself. Digests of
// different schemes are not comparable.
inline constexpr const char* kStateDigestScheme = "anchor.state-digest/v2";

// SHA-256 digests of the whole training state (Trainer::digest): one per group
// over its tensors' digests by name, and one per tensor ("model/<name>",
// "optimizer/<name>.<exp_avg|exp_avg_sq|step>", "scaler/<name>", "rng/<generator>").
struct StateDigest {
  std::string model;  // parameters, then buffers
  std::string optimizer;
  std::string rng;
  std::optional<std::string> scaler;  // absent in digests written before the loss scaler existed
  double loss_scale = 1;
  std::int64_t step = 0;
  std::map<std::string, std::string> tensors;

  nlohmann::json to_json() const;
  // The groups without the per-tensor digests, as the report keeps them.
  nlohmann::json groups_json() const;
  // Throws std::invalid_argument naming the first missing or mistyped field, from `where`.
  static StateDigest from_json(const nlohmann::json& j, const std::string& where);
};

// Bytes of parameters, gradients (as they stand) and optimizer state.
struct StateBytes {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;

  nlohmann::json to_json() const;
  static StateBytes from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace anchor::train
