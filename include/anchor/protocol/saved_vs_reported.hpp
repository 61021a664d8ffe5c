#pragma once
// What a program reports against what its checkpoints hold (issue 43, item
// 1). The verdict of a program pilot compares the `digests` lines its workers
// print; a program that prints the reference's lines while it restores less
// would pass on them alone. The helper's digest of a component is the SHA-256
// of the file it saves that component as (anchor_pilot's Pilot.digests), so
// every save line can be checked against the committed step that anchor
// verified: worker A's save of K, and worker B's save of K+R. A difference is
// a contradiction, and fails the pilot (exit 3) naming the component.
//
// Here only the judgement, over what the workers reported and what the step
// pins: no processes, no torch, no files.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::protocol {

// What a committed step of the helper's checkpoints pins, from its verified
// state.json and manifest.json.
// state.json's "format" in a step anchor_pilot's Pilot.save wrote (python/anchor_pilot/pilot.py).
inline constexpr const char* kHelperStateFormat = "anchor-pilot.state/v1";

struct PinnedStep {
  std::int64_t step = 0;
  std::string format;                                     // state.json's; only the helper's is cross-checked
  std::string dir;                                        // as the report names it
  std::map<std::string, std::string> sha256;              // file -> its whole-file SHA-256 (per-tensor pins: absent)
  std::map<std::string, std::vector<std::string>> files;  // component -> its files; per rank: in rank order
  std::set<std::string> dcp;                              // saved through DCP: a digest is of the rank's shard
  // Throws Error(kVerification) naming the field when state.json or manifest.json is not the helper's shape.
  static PinnedStep from_json(std::int64_t step, const std::string& dir, const nlohmann::json& state,
                              const nlohmann::json& manifest);
};

// One component whose reported digest is not the SHA-256 of the file it was saved as.
struct Contradiction {
  std::string worker;  // "worker A", "worker B"
  int rank = 0;
  std::int64_t step = 0;
  std::string component, file, reported, pinned;
  std::string words() const;
  nlohmann::json to_json() const;
};

// One save's cross-check: what was compared, and what contradicts.
struct SaveCrossCheck {
  std::string worker;
  std::int64_t step = 0;
  std::string dir;
  int compared = 0;                      // component digests compared with a file's pin
  std::vector<std::string> not_checked;  // "model (sharded through DCP)", ...
  std::vector<Contradiction> contradictions;
  nlohmann::json to_json() const;
};

// Each rank's digests line at its save of `pinned.step` against the files the
// step pins: rank 0's for a file every rank shares, each rank's for its own.
// A step another writer made (not the helper's state format) is not checked,
// and says so: its digests are the program's own fingerprints, not file SHA-256s.
// A component the step does not hold, or a rank that printed no line, is a
// contradiction too: the save the line describes is not the one committed.
SaveCrossCheck cross_check_save(const std::string& worker, const PinnedStep& pinned,
                                const std::map<int, const WorkerLog*>& ranks);

}  // namespace anchor::protocol
