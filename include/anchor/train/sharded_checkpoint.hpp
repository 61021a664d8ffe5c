#pragma once
// A checkpoint written by every rank of a process group into one commit
// (docs/checkpoints.md, "Files written by every rank"): rank 0 runs the store's
// commit protocol; the others write their files (Trainer::save_request at
// world > 1: their optimizer shard and RNG file) into rank 0's temp directory,
// fsync them and report their digests through the group's store; rank 0 lists
// them in the manifest and commits only once every rank has reported. A rank
// that dies or hangs fails the save on every rank within the group's timeout
// (no COMMITTED).
#include <map>
#include <optional>
#include <string>

#include "anchor/checkpoint/store.hpp"

namespace anchor::dist {
class ProcessGroup;
}

namespace anchor::train {

// Every rank calls it, in the same order, with the files it writes. Returns
// the result on rank 0, nullopt on the others; every rank returns only after
// the commit (a barrier). `hook` runs in rank 0's save only. Every rank's
// files are pinned per tensor; `written`, when given, receives the digests of
// the files THIS rank wrote, by name (Trainer::known_digests).
// Test seam ANCHOR_DIST_FAULT=sigkill_save:<rank>:<step>: that rank SIGKILLs
// itself in the save of that step once its own files are written, before it
// reports them.
std::optional<checkpoint::SaveResult> save_distributed(
    dist::ProcessGroup& pg, checkpoint::Store& store, checkpoint::SaveRequest req, const checkpoint::Hook& hook = {},
    std::map<std::string, checkpoint::TensorDigests>* written = nullptr);

}  // namespace anchor::train
