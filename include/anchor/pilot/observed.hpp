#pragma once
// A program pilot in observed mode (docs/program.md, "Your own checkpoint
// code"): the program saves and loads with its own code, anchor_pilot reports
// which files each save wrote under the checkpoint directory, and anchor
// kills the save of K+R once its first file is whole. What the kill left,
// and the files of the saves that finished, pinned by digest. No torch.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "anchor/checkpoint/dcp.hpp"

namespace anchor::pilot::observed {

// `path` with every run of digits that reads as `from` written as `to`, in
// the run's width when it was zero-padded: "ckpt/step_000004/model.pt" with
// 4 -> 8 is "ckpt/step_000008/model.pt"; "checkpoint-4" is "checkpoint-8";
// "v14/4.pt" is "v14/8.pt".
std::string with_step(const std::string& path, std::int64_t from, std::int64_t to);

// Every regular file under `root`, relative to it, sorted (symlinks not
// followed; anchor's own .anchor.lock left out).
std::vector<std::string> files_under(const std::string& root);

// The save anchor killed: the files under the checkpoint directory that no
// finished save claimed, and the files the save of `saved` wrote whose
// counterpart for `killed` (with_step) is not there. `finished` holds the
// files every finished save reported, relative to the directory.
struct TornSave {
  std::int64_t step = 0;
  std::vector<std::string> files, missing;
  std::vector<std::uint64_t> sizes;  // of `files`, as the kill left them
  bool empty() const { return files.empty() && missing.empty(); }
  nlohmann::json to_json() const;
  // "it holds model.pt (0 bytes) and lacks optimizer.pt, COMPLETE (which your save of step 4 wrote)"
  std::string words(std::int64_t saved) const;
  // "step 8: 1 file written, 5 missing"
  std::string summary() const;
  // Whether `text` (a resumed run's error) names one of its files or missing files.
  bool named_in(const std::string& text) const;
};
TornSave torn_save(const std::string& ckpt_dir, const std::set<std::string>& finished,
                   const std::vector<std::string>& saved_files, std::int64_t saved, std::int64_t killed);

// One finished save, hashed now (streaming, constant memory): each file as
// the program reported it (relative to the checkpoint directory), its size and
// SHA-256. to_json(): {"step", "files": [{"path", "bytes", "sha256"}]}, each
// path printable. Throws Error (kIo) naming a file that cannot be read.
struct HashedSave {
  struct File {
    std::string path;  // as reported, relative to the checkpoint directory
    std::uint64_t bytes = 0;
    std::string sha256;
  };
  std::int64_t step = 0;
  std::vector<File> files;
  nlohmann::json to_json() const;
};
HashedSave hashed_save(const std::string& ckpt_dir, std::int64_t step, const std::vector<std::string>& files);

// Copies one finished save into `to` for the determinism control: each of its
// files to the same relative path under `to`, the copy checked against the
// SHA-256 it was pinned with. Returns "" when every copy is the file as it was
// pinned, else what is not ("step_4/model.pt changed after the save (...)").
// A path that is absolute or climbs out with ".." is refused, never copied.
// Throws Error (kIo) when a copy cannot be read back.
std::string copy_pinned_save(const std::string& ckpt_dir, const HashedSave& save, const std::string& to);

// The DCP checkpoints among one finished save's files (each directory in
// which it wrote a `.metadata`, relative to ckpt_dir), checked as
// `anchor checkpoint verify` checks them (checkpoint/dcp.hpp).
std::vector<checkpoint::DcpVerification> dcp_in_save(const std::string& ckpt_dir,
                                                     const std::vector<std::string>& files);

// One of a program's saves checked against the digests a pilot's report
// pinned (report.json's program_checkpoints; `anchor checkpoint verify DIR
// --against REPORT`). The save is the one whose files lie under a directory
// named as `dir` is ("step_3/..." for .../ckpt/step_3); every file it pinned
// must be in `dir` with its size and SHA-256, and `dir` must hold no other.
// Throws Error (kUsage) when the report pins no save there (naming those it pins).
struct PinnedCheck {
  std::int64_t step = 0;
  std::size_t files = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> problems;
  nlohmann::json to_json() const;
};
PinnedCheck check_pinned(const std::string& dir, const nlohmann::json& report);

}  // namespace anchor::pilot::observed
