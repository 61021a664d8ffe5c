#pragma once
// The fields of a checkpoint's state.json that a restore reads, type-checked.
//
// The store checks that state.json is an object with the directory's integer
// "step" (docs/checkpoints.md); the trainer and the pilot read more fields
// from it. A field of the wrong type ("world_size": "2") must be a clear
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

// What a restore uses of state.json (Trainer::save_request writes them all;
// a field that is absent takes the default shown).
// The most ranks a saved world_size may name (read_saved_state refuses more).
constexpr int kMaxWorldSize = 65536;

// The layout of the state.json the trainer writes (its "format_version").
// read_saved_state refuses any other: a checkpoint of a newer anchor is not
// guessed at. Raise it with any change a reader of version 1 would misread,
// and teach read_saved_state the old ones it still reads.
inline constexpr int kStateFormatVersion = 1;

// The "format" tag in the __metadata__ of each safetensors file the trainer
// writes; a restore refuses a file whose tag is another (check_file_formats).
inline constexpr const char* kModelFileFormat = "anchor.model/v1";               // model.safetensors
inline constexpr const char* kOptimizerFileFormat = "anchor.adamw/v1";           // optimizer.safetensors
inline constexpr const char* kOptimizerShardFileFormat = "anchor.adamw-shard/v1";  // optimizer-rank*-of-*
inline constexpr const char* kRngFileFormat = "anchor.rng/v1";                   // rng.safetensors, rng-rank*-of-*
inline constexpr const char* kScalerFileFormat = "anchor.loss_scaler/v1";        // scaler.safetensors

// The tag a file of this name must carry; nullptr for a name the trainer does not write.
const char* expected_file_format(const std::string& file_name);

// Checks the "format" tag in the __metadata__ of every file of a loaded
// checkpoint against expected_file_format: another tag is
// Error(kVerification) "<dir>/<file>: format anchor.model/v2, and this anchor
// reads anchor.model/v1 ...", with what to do. A file without a tag, or of a
// name the trainer does not write, is not judged here (the restore names a
// missing tensor or file). Trainer::restore and the pilot's start from a
// checkpoint call it before they look at a tensor.
void check_file_formats(const checkpoint::Store::Loaded& checkpoint);

struct SavedState {
  std::int64_t step = 0;
  int world_size = 1;
  std::string strategy = "ddp";
  std::string config_digest;         // "" when absent
  nlohmann::json run_id;             // a string, or null when absent
  nlohmann::json config;             // an object, or null when absent
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
