#pragma once
// The pilot's measurement of activation checkpointing (issue 8): both sides of
// the trade on this machine. No torch in this header.
#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::pipeline {

// Runs in the resume worker's memory probe when train.activation_checkpointing
// is N > 0. Two fresh trainers from the same seed, one after the other (so the
// peaks share a baseline): one as configured, one with checkpointing off. Each
// takes a first step (full optimizer state), then measured steps: the peak
// tensor memory of the first measured step (reset right before it) and the
// fastest measured step's compute time. Since the recompute is exact on CPU,
// both end with the same parameters; the figures say whether they did.
// Returns the "activation_checkpointing" section of the report (docs/report.md).
nlohmann::json measure_activation_checkpointing(const config::Config& cfg);

}  // namespace anchor::pipeline
