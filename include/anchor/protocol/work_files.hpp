#pragma once
// The files a built-in worker (worker.cpp) leaves in <run dir>/work for the
// supervisor (supervisor.cpp) to read: each name made in one place, for both.
#include <string>

namespace anchor::protocol::work {

inline std::string dir(const std::string& run_dir) { return run_dir + "/work"; }

// A worker's results: <role>.json from rank 0, <role>-rank<r>.json from the
// others; role is reference, resume or probe.
inline std::string result(const std::string& run_dir, const std::string& role, int rank = 0) {
  return dir(run_dir) + "/" + role + (rank == 0 ? "" : "-rank" + std::to_string(rank)) + ".json";
}

// Where worker A starts (written by rank 0 as soon as it has chosen), and the
// precision stage's account (passed or not): both read even when worker A fails.
inline std::string start(const std::string& run_dir) { return dir(run_dir) + "/start.json"; }
inline std::string precision(const std::string& run_dir) { return dir(run_dir) + "/precision.json"; }

// The stages a worker's rank 0 has finished so far, with their figures, and
// worker A's training steps: rewritten after each stage, so that a worker
// that fails later leaves what passed before it ({"stages", "train_steps"}).
inline std::string stages_so_far(const std::string& run_dir, const std::string& role) {
  return dir(run_dir) + "/" + role + ".stages.json";
}

// What a worker is told (the worker protocol's spec, worker_protocol.hpp),
// written by the supervisor before it starts the worker's ranks, on every node.
inline std::string spec(const std::string& run_dir, const std::string& role) {
  return dir(run_dir) + "/" + role + ".spec.json";
}

}  // namespace anchor::protocol::work
