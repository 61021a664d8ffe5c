#pragma once
// The determinism control (pilot.determinism, docs/program.md "Nondeterminism
// or a resume bug?"): when a resume does not match, worker B's steps run a
// second time from the same save, and the two runs of the same steps tell a
// program that does not repeat itself (nondeterministic kernels, a seed taken
// from the clock) apart from a resume that brings back the wrong state.
//
// Here only the judgement, over what the workers reported: no processes, no torch.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::protocol {

// How far two runs of the same steps apart: the figures of every step after
// `from` up to `last` (loss, gradient norm, learning rate) and the state each
// fingerprinted at its save of `last`.
struct RunDifference {
  bool same = true;  // every figure bitwise and the final state equal
  double max_relative =
      0;              // the largest relative difference of a figure (|a - b| / max(|a|, |b|)); inf: one is not finite
  std::string first;  // the first figure that differs: "loss at step 5 (rank 1)"; "" when none does
  std::vector<std::string> state;  // the components whose digest differs at `last`, each once
  std::int64_t steps = 0;          // the steps compared (every rank's)
  nlohmann::json to_json() const;
  // Adds one rank's pair: `a` and `b` ran the same steps.
  void add(const WorkerLog& a, const WorkerLog& b, std::int64_t from, std::int64_t last, int rank);
};

// What the control found.
enum class Finding {
  kRepeatable,        // the same steps from the same save agree bitwise: a mismatch is the resume's
  kNondeterministic,  // they differ, and the resume's difference is within theirs
  kBoth,              // they differ, and the resume differs by more than they do
};

struct DeterminismVerdict {
  Finding finding = Finding::kRepeatable;
  RunDifference control;           // worker B against its repeat
  RunDifference resume;            // the reference against worker B
  double suggested_tolerance = 0;  // nondeterministic: a pilot.tolerance that holds the run-to-run difference
  std::int64_t from = 0, last = 0;
  const char* finding_name() const;  // "repeatable" | "nondeterministic" | "nondeterministic and resume"
  // One paragraph in the user's terms: what ran twice, what it found, what to do.
  std::string words(bool resume_matched) const;
  nlohmann::json to_json() const;
};

// The smallest power of ten at least 4x the run-to-run relative difference
// (a margin for a difference measured once), and at least 1e-6 (a few float32
// units in the last place: where a nondeterministic program's figures can
// differ whatever one sample showed); 0 when there is none.
double suggest_tolerance(double max_relative);

DeterminismVerdict judge_determinism(const RunDifference& control, const RunDifference& resume, std::int64_t from,
                                     std::int64_t last);

}  // namespace anchor::protocol
