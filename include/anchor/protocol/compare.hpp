#pragma once
// The resume verdict: does the resumed worker (B) match the uninterrupted
// reference (A)? One verdict type for both kinds of worker, one tolerance rule
// and one report shape (docs/report.md, "resume"); each worker has its
// comparer over what it reports:
//
// - the built-in worker (compare_resume): the state restored against the
//   state saved per group (model, optimizer, rng, scaler, step), the eval
//   before save and after restore, then step by step the learning rate
//   (lr_schedule), the batch digest (data_cursor), the loss scale (scaler),
//   loss and gradient norm (gradients), and the final state;
// - the user's program (protocol::compare, worker_protocol.hpp): the digests
//   of the helper's components (model, optimizer, scheduler, scaler, rng,
//   data, and the program's own) after the restore and at the last step, and
//   the loss of every resumed step.
//
// The component names are the worker's own: the built-in worker names its
// state groups and the figures that follow from them; a program's are the
// names it gave anchor_pilot. No torch here.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/protocol/worker_result.hpp"

namespace anchor::protocol {

struct Check {
  std::string name;  // "restored vs saved: optimizer state", "loss at step 5"
  bool ok = false;
  std::string detail;
  std::string component;  // what it checks, or the first component that differs ("" when none applies)
};

struct Verdict {
  std::string mode = "bitwise";  // bitwise | tolerance
  double tolerance = 0;
  std::vector<std::string> cause;     // what diverged first: state restored wrongly, else the first figure
  std::vector<std::string> diverged;  // every component a failed check names
  std::vector<Check> checks;
  std::int64_t saved_step = 0, restored_step = 0, last_step = 0;

  explicit Verdict(double tol = 0) : mode(tol > 0 ? "tolerance" : "bitwise"), tolerance(tol) {}
  bool match() const { return cause.empty() && diverged.empty(); }
  // Records a check; a failed one adds its component to `diverged`.
  void add(Check c);
  // {"verdict": "match"|"mismatch", "mode", "tolerance", "cause", "diverged",
  //  "checks": [{name, ok, detail, component?}], "saved_step", "restored_step", "last_step"}
  nlohmann::json to_json() const;
};

// The one tolerance rule: tolerance <= 0 (or a non-finite figure) asks for
// equality; else |a - b| <= tolerance * max(|a|, |b|, 1e-12).
bool within_tolerance(double a, double b, double tolerance);

// The built-in worker's verdict. tolerance == 0: bitwise (every figure and
// digest). tolerance > 0: figures within it; digests of model and optimizer
// are reported but not required to match (GPU kernels without determinism).
Verdict compare_resume(const WorkerResult& reference, const WorkerResult& resume, double tolerance);

// Every rank's verdict, rank 0 first, and the one verdict the pilot gives:
// rank 0's, which a mismatch on any other rank makes a mismatch, with that
// rank's causes, what diverged and its failed checks named by rank ("rank 1:
// optimizer"). Kept typed for the drivers (pilot/outcome); to_json() is the
// report's "resume" section.
struct RankVerdicts {
  // Throws Error (kRuntime) when `ranks` is empty.
  explicit RankVerdicts(std::vector<Verdict> ranks);
  std::vector<Verdict> ranks;
  Verdict combined;
  bool match() const { return combined.match(); }
  // [{rank, verdict, cause}] for every rank.
  nlohmann::json per_rank_json() const;
  // combined.to_json() with "per_rank" (docs/report.md, "resume").
  nlohmann::json to_json() const;
};

}  // namespace anchor::protocol
