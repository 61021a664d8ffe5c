#pragma once
// The pilot's measurement of activation checkpointing (issue 8): both sides of
// the trade on this machine. No torch in this header.
#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::worker {

// Runs in the resume worker's memory probe when train.activation_checkpointing
// is N > 0, against the same config with checkpointing off. Memory: a fresh
// trainer per side, one after the other (so the peaks share a baseline), the
// peak tensor bytes of its second step (full optimizer state). Time: two more
// trainers alive together, taking turns step by step (each with its own
// generator state, the order alternating), after one untimed step each: the
// median step time of each side, and the median of the paired differences
// within a round as the time added. Since the recompute is exact on CPU, both
// end with the same parameters; the figures say whether they did.
// Returns the "activation_checkpointing" section of the report (docs/report.md).
nlohmann::json measure_activation_checkpointing(const config::Config& cfg);

}  // namespace anchor::worker
