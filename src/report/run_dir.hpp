#pragma once
// Private to the report module: reading a run directory's checkpoints, shared
// by signing and verification so both see the same set.
#include <optional>
#include <string>
#include <vector>

#include "anchor/checkpoint/verified_dir.hpp"

namespace anchor::report::detail {

// A directory under <run_dir>/checkpoints named "step-N" (no '.') that holds
// an entry named COMMITTED. "step-N.tmp-*" is never one, even with a
// COMMITTED inside (a save killed before its rename).
struct ClaimedCheckpoint {
  std::string dir;                    // relative to run_dir: "checkpoints/step-00000002"
  bool verified = false;              // checkpoint::Store::verify found no problem
  std::vector<std::string> problems;  // what it found otherwise (valid UTF-8)
};

// Every directory that claims to be a committed checkpoint, each verified
// completely by the checkpoint store (every file's size and SHA-256 against
// its manifest, strict safetensors, state.json), sorted by dir. Reads every
// such checkpoint once. Throws Error(kIo) when <run_dir>/checkpoints exists
// but cannot be listed.
// One that `seen` still matches is counted verified without being read
// (checkpoint::Store::verify).
std::vector<ClaimedCheckpoint> claimed_checkpoints(const std::string& run_dir,
                                                   const std::vector<checkpoint::VerifiedDir>& seen = {});

// The committed checkpoints: those of claimed_checkpoints() that verify, as
// paths relative to run_dir ("checkpoints/step-00000002"), sorted. A COMMITTED
// file alone does not make a checkpoint.
std::vector<std::string> committed_checkpoints(const std::string& run_dir);

// The run's own files that a later reader trusts, besides report.json and the
// checkpoints, as paths relative to run_dir, sorted: report.md, manifest.json,
// config.json, events.jsonl and every regular file under work/ (the workers'
// results), those that exist. Signing makes each a subject; verify warns about
// one present on disk but not signed.
std::vector<std::string> run_files(const std::string& run_dir);

// The SHA-256 a COMMITTED file names: its content with surrounding whitespace
// and an optional "sha256:" prefix removed, when that is 64 lowercase hex;
// nullopt when it holds anything else (then it is not compared).
std::optional<std::string> committed_sha256(const std::string& committed_content);

// Normalises a digest written as "<hex>" or "sha256:<hex>" (any case).
std::string normalise_sha256(std::string s);

}  // namespace anchor::report::detail
