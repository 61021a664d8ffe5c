#pragma once
// The training-state format: what a built-in trainer's checkpoint holds and
// how it is named, in one place (docs/checkpoints.md, "What a checkpoint
// holds"). The checkpoint store (checkpoint/store.hpp) owns the commit
// protocol and the manifest; this module owns the layout on top of it: the
// file names, the tensor names inside them, each file's "format" tag, the
// fields of state.json and their version, and the gate a restore passes
// first (read_saved_state, check_file_formats). Trainer::save_request and
// Trainer::restore build and read checkpoints only through these names.
// Changing the format means changing this module, docs/checkpoints.md and
// tests/unit/train/test_state_format.cpp, and raising a version below.
//
// The store checks that state.json is an object with the directory's integer
// "step"; a field of the wrong type ("world_size": "2") is a clear
// verification error naming the file and the field, not a JSON library
// exception that surfaces as an internal error. No torch here.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/store.hpp"

namespace anchor::train {

// The most ranks a saved world_size may name (read_saved_state refuses more).
constexpr int kMaxWorldSize = 65536;

// The layout of the state.json the trainer writes (its "format_version").
// read_saved_state refuses any other: a checkpoint of a newer anchor is not
// guessed at. Raise it with any change a reader of version 1 would misread,
// and teach read_saved_state the old ones it still reads.
inline constexpr int kStateFormatVersion = 1;

// The "format" tag in the __metadata__ of each safetensors file the trainer
// writes; a restore refuses a file whose tag is another (check_file_formats).
inline constexpr const char* kModelFileFormat = "anchor.model/v1";                 // model.safetensors
inline constexpr const char* kOptimizerFileFormat = "anchor.adamw/v1";             // optimizer.safetensors
inline constexpr const char* kOptimizerShardFileFormat = "anchor.adamw-shard/v1";  // optimizer-rank*-of-*
inline constexpr const char* kRngFileFormat = "anchor.rng/v1";                     // rng.safetensors, rng-rank*-of-*
inline constexpr const char* kScalerFileFormat = "anchor.loss_scaler/v1";          // scaler.safetensors

// The tag a file of this name must carry; nullptr for a name the trainer does not write.
const char* expected_file_format(const std::string& file_name);

// The files. One rank writes model, optimizer, rng and scaler. With several
// ranks rank 0 writes model and scaler (and, under DDP, optimizer), and every
// rank its own RNG stream and, under zero1/zero2, its optimizer shard.
inline constexpr const char* kModelFile = "model.safetensors";          // parameters, then buffers, by name
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";  // AdamW's state of every parameter
inline constexpr const char* kScalerFile = "scaler.safetensors";        // the loss scaler's state
// "rng.safetensors" for one rank, else "rng-rank00001-of-00002.safetensors".
std::string rng_file(int rank, int world);
// "optimizer-rank00001-of-00002.safetensors": the shard rank 1 of 2 owns.
std::string optimizer_shard_file(int rank, int world);
// optimizer.safetensors or a shard: where AdamW's tensors may be.
bool is_optimizer_file(const std::string& file_name);

// Tensor names. Model and scaler tensors go by their own names; AdamW's state
// of parameter P is "P.exp_avg", "P.exp_avg_sq" and "P.step" (an I64 scalar);
// the RNG file holds "cpu_generator" and, on a GPU, "cuda_generator"; the
// scaler file "scale" (F64), "growth_tracker" and "skipped_steps" (I64).
enum class AdamWTensor { kExpAvg, kExpAvgSq, kStep };
std::string adamw_tensor(const std::string& param, AdamWTensor which);
inline constexpr const char* kCpuGenerator = "cpu_generator";
inline constexpr const char* kCudaGenerator = "cuda_generator";
inline constexpr const char* kScalerScale = "scale";
inline constexpr const char* kScalerGrowthTracker = "growth_tracker";
inline constexpr const char* kScalerSkippedSteps = "skipped_steps";
// The parameter whose "<P>.step" this name is; nullopt for another tensor.
std::optional<std::string> adamw_step_param(const std::string& tensor_name);

// What the trainer records in state.json besides the caller's fields
// (run_id, config, eval_loss: the pilot's). state_json writes exactly the
// fields read_saved_state checks, with format_version kStateFormatVersion.
struct StateFields {
  std::int64_t step = 0;
  std::string schedule;  // train.schedule.kind
  double next_lr = 0;    // the learning rate of step `step`
  std::int64_t total_steps = 0;
  std::string precision;  // fp32 | bf16 | fp16
  bool loss_scale_enabled = false;
  double scale = 1;
  std::int64_t growth_tracker = 0, skipped_steps = 0;
  int world_size = 1;
  std::string strategy = "ddp";  // ddp | zero1 | zero2
  int threads = 1;
  std::string libtorch;  // the version that saved it
  std::string config_digest;
};
// `extra` (an object) with the trainer's fields set over it.
nlohmann::json state_json(const StateFields& fields, nlohmann::json extra = nlohmann::json::object());

// Checks the "format" tag in the __metadata__ of every file of a loaded
// checkpoint against expected_file_format: another tag is
// Error(kVerification) "<dir>/<file>: format anchor.model/v2, and this anchor
// reads anchor.model/v1 ...", with what to do. A file without a tag, or of a
// name the trainer does not write, is not judged here (the restore names a
// missing tensor or file). Trainer::restore and the pilot's start from a
// checkpoint call it before they look at a tensor.
void check_file_formats(const checkpoint::Store::Loaded& checkpoint);

// What a restore uses of state.json (state_json writes them all; a field
// that is absent takes the default shown).
struct SavedState {
  std::int64_t step = 0;
  int world_size = 1;
  std::string strategy = "ddp";
  std::string config_digest;  // "" when absent
  nlohmann::json run_id;      // a string, or null when absent
  nlohmann::json config;      // an object, or null when absent
};

// Checks every field the trainer writes that is present in `state` (step,
// format_version, data_cursor, lr_schedule, precision, loss_scale,
// world_size, strategy, threads, libtorch, config_digest, eval_loss, run_id,
// config) against its type, collects every mismatch, and throws
// Error(kVerification) "<file>: <field> is a JSON <type> (<value>), expected
// <what>; ..." naming them all. `file` names state.json in messages. A
// format_version other than kStateFormatVersion is refused (kVerification),
// saying which version it is and what to do; one without the field is read
// as version 1, the only one anchor ever wrote.
SavedState read_saved_state(const nlohmann::json& state, const std::string& file);

}  // namespace anchor::train
