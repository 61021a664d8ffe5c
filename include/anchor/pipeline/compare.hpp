#pragma once
// The resume verdict: does the resumed worker (B) match the uninterrupted
// reference (A)? Compares the state restored against the state saved (per
// group: model, optimizer, RNG, step), the eval before save and after restore,
// and then step by step the learning rate (schedule), the batch digest (data
// cursor), loss and gradient norm, and the final state. Names every state that
// diverged. Typed worker results in (worker_result.hpp), JSON out: no torch.
#include <nlohmann/json.hpp>

#include "anchor/pipeline/worker_result.hpp"

namespace anchor::pipeline {

// tolerance == 0: bitwise (exact equality of every figure and digest).
// tolerance > 0: figures within that relative difference; digests are then
// reported but not required to match (GPU kernels without determinism).
// Returns {"verdict": "match"|"mismatch", "cause": [state names], "mode": "bitwise"|"tolerance",
//          "tolerance": x, "diverged": [state names], "checks": [{name, ok, detail}]}.
nlohmann::json compare_resume(const WorkerResult& reference, const WorkerResult& resume, double tolerance);

}  // namespace anchor::pipeline
