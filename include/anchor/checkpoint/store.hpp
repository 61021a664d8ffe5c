#pragma once
// The checkpoint store: one directory per step, committed atomically.
//
//   <root>/step-00000002/{<files>.safetensors, state.json, manifest.json, COMMITTED}
//   <root>/step-00000004.tmp-<random>/    a save in progress (never loaded)
//   <root>/step-00000000.trash-<random>/  a retention delete in progress
//
// docs/checkpoints.md describes the protocol step by step, the hook points,
// the restore policy and the ANCHOR_FAULT seam.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/checkpoint/verified_dir.hpp"
#include "anchor/common/fs.hpp"

namespace anchor::checkpoint {

// manifest.json's format. v2 (written) pins each safetensors file this
// process writes per tensor (TensorDigests) and every other file (state.json,
// a file another rank wrote) by one SHA-256; v1 (read, written before v2 and
// by the Python helper, python/anchor_pilot) pins every file by one SHA-256.
constexpr const char* kManifestFormat = "anchor.checkpoint-manifest/v2";
constexpr const char* kManifestFormatV1 = "anchor.checkpoint-manifest/v1";
// A file of more tensors than this is pinned whole in a v2 manifest too: its
// per-tensor entry would take ~100 bytes a tensor (a million tiny tensors: a
// manifest past the 64 MiB a checkpoint's manifest may hold), and so many
// streams gain nothing from being hashed apart.
constexpr std::size_t kMaxTensorsPinnedApart = 65536;

// One safetensors file of a checkpoint. `filename` is a plain name (no '/').
struct FileContent {
  std::string filename;
  std::vector<TensorRef> tensors;
  std::map<std::string, std::string> metadata;
};

// A file another process (another rank of a distributed save) wrote into this
// save's temp directory, fsynced, with its digests.
struct RemoteFile {
  std::string filename;
  FileDigest digest;                     // the size; and the SHA-256 when not pinned per tensor
  std::optional<TensorDigests> tensors;  // pinned per tensor (manifest v2), when given
};

// Files written by other processes (docs/checkpoints.md, "Files written by
// every rank"). `announce` is called with the temp directory's path right
// after it exists (after the "after_mkdir" point); `collect` after this
// process's own files, and returns every remote file once its writer has
// fsynced it (it may block, bounded by the caller's timeout; a throw fails the
// save like an I/O error: the temp dir is removed, no COMMITTED). The store
// checks each one is in the temp dir with the reported size, lists it in the
// manifest with its digest, and fsyncs the directory before COMMITTED.
struct RemoteFiles {
  std::function<void(const std::string& temp_dir)> announce;
  std::function<std::vector<RemoteFile>()> collect;
};

struct SaveRequest {
  std::int64_t step = 0;
  std::vector<FileContent> files;
  RemoteFiles remote;    // empty: every file is written by this process
  nlohmann::json state;  // written as state.json; the store sets "step" (a different "step" is an error)
};

// Called at each named point of the save protocol, in this order:
//   "begin", "after_mkdir", "after_file:<filename>" (each safetensors file),
//   "after_remote_files" (only when req.remote.collect is set), then
//   "after_file:state.json", "after_manifest", "after_committed",
//   "after_dir_fsync", "after_rename", "after_parent_fsync", "done".
// A hook may throw: the save then fails like on an I/O error (at "done" the
// checkpoint is already committed and stays; the exception still propagates).
using Hook = std::function<void(std::string_view point)>;

// The environment fault seam (for e2e tests of the real binary):
//   ANCHOR_FAULT=<point>:<exit|sigkill>         at that point of every save
//   ANCHOR_FAULT=<point>@<step>:<exit|sigkill>  only in the save of that step
// "exit" flushes stdio and calls _exit(kFaultExitCode); "sigkill" raises SIGKILL.
// This is the only place library code ends the process, on purpose. A value
// that is malformed, or names a point this save never reaches (a typo, or
// "after_file:<f>" for a file the request does not hold), is Error(kUsage)
// listing the known points, at the start of every save: a mistyped fault
// never lets a fault test pass silently.
constexpr int kFaultExitCode = 86;
constexpr const char* kFaultEnv = "ANCHOR_FAULT";

struct SaveResult {
  std::string dir;          // <root>/step-NNNNNNNN
  double seconds = 0;       // wall time of the save
  std::uint64_t bytes = 0;  // every file written, manifest and COMMITTED included
  // The digests of the safetensors files this process wrote, by file name:
  // what the manifest pins, for a caller that reuses them instead of hashing
  // the same bytes again (Trainer::digest).
  std::map<std::string, TensorDigests> digests;
};

// "step-00000002"
std::string step_dir_name(std::int64_t step);

class Store {
 public:
  // `fs` must outlive the store. Nothing is touched on disk until save().
  explicit Store(std::string root, fs::FileSystem& fs = fs::real_fs());

  const std::string& root() const { return root_; }

  // Runs the commit protocol (creates root if missing). On success step-N holds
  // the files and is durable (parent fsynced); an existing step-N is replaced
  // atomically (exchange, then the old one is deleted). On any failure the temp
  // directory is removed (best effort), step-N and every older checkpoint are
  // as before, and the Error (kIo: naming the operation, path and errno; kUsage:
  // a bad request) is rethrown with the step prefixed.
  SaveResult save(const SaveRequest& req, const Hook& hook = {});

  struct Skipped {
    std::string dir;
    std::string reason;
  };
  struct Loaded {
    std::int64_t step = 0;
    std::string dir;
    nlohmann::json state;
    nlohmann::json manifest;
    std::map<std::string, SafetensorsFile> files;  // by filename
    // The verified digests of the files the manifest pins per tensor (v2),
    // by file name: the restored tensors' digests, without hashing them again.
    std::map<std::string, TensorDigests> digests;
    // The directory as this verification saw it, for another process of the
    // run to count it verified without reading it again (VerifiedDir; empty
    // when a file changed while it was read, or an entry could not be examined).
    VerifiedDir verified;
    std::vector<Skipped> skipped;  // newer dirs passed over, and why
  };
  // The newest step-N (N <= max_step when given) that is committed and
  // verifies completely; every file is read once and hashed while read. Every
  // newer directory passed over (temp, trash, uncommitted, corrupt) is
  // recorded in `skipped` and logged. nullopt when none verifies (when
  // `skipped_out` is given it receives the skips then too). Throws Error(kIo)
  // only when the root exists but cannot be listed.
  std::optional<Loaded> restore_newest(std::optional<std::int64_t> max_step = std::nullopt,
                                       std::vector<Skipped>* skipped_out = nullptr) const;

  struct Verification {
    bool ok = false;
    std::string dir;                    // the path as given (raw bytes; printable() it for JSON)
    std::vector<std::string> problems;  // every problem found, each a full sentence, valid UTF-8
    std::int64_t step = -1;             // from the directory name; -1 when it has none
    // "committed" (ok: verified completely; the only state that counts as a
    // checkpoint anywhere), "uncommitted" (no COMMITTED entry), "invalid",
    // "unreadable" (the directory or an entry could not be examined: the
    // problem names the errno), "temporary", "trash".
    std::string state;
    std::uint64_t bytes = 0;  // total size of the regular files in the dir
  };
  // Checks one checkpoint directory completely and collects every problem.
  // Reads only regular files (fs::open_regular): a FIFO or device in the
  // directory is a problem, never a hang. A step directory that one of `seen`
  // still matches (VerifiedDir::still_matches: a complete verification of
  // this run saw it so, Loaded::verified) counts as verified without being read.
  Verification verify(const std::string& step_dir, const std::vector<VerifiedDir>& seen = {}) const;

  // verify() with what the verification read: state.json and manifest.json
  // as parsed then (null unless `v.ok`). Never takes a VerifiedDir's word.
  struct Pinned {
    Verification v;
    nlohmann::json state;
    nlohmann::json manifest;
  };
  Pinned pinned(const std::string& step_dir) const;

  // Every step-* directory under root (committed, temp, trash), newest first,
  // each verified completely (this reads every checkpoint once).
  // A directory that is gone by the time it is verified (retention removed it
  // meanwhile) is left out, not called invalid (verify_listed).
  std::vector<Verification> list(const std::vector<VerifiedDir>& seen = {}) const;
  // verify() of a directory a listing found: nullopt when it no longer exists.
  std::optional<Verification> verify_listed(const std::string& step_dir,
                                            const std::vector<VerifiedDir>& seen = {}) const;

  // Removes every temp and trash directory under root (call at start-up, never
  // while another process saves into the same root). Returns the removed paths.
  std::vector<std::string> remove_stale_temps();

  // Keeps the newest `keep_last` (>= 1) checkpoints that verify; deletes every
  // step directory older than the oldest of them (rename to a trash name,
  // fsync root, then remove: a kill in between leaves only trash). Directories
  // newer than that which fail verification are left for inspection. Deletes
  // nothing when fewer than keep_last verify. Returns the deleted step dirs.
  // `just_committed`: the directory of the save this process has just
  // committed (SaveResult::dir) and written every file of, counted as
  // verifying without being read again while its COMMITTED file is there: its
  // bytes were hashed as they were written, and reading them back here would
  // only hash the page cache's copy a second time. Every other directory is
  // verified completely. So with it, a step damaged after its save (beneath
  // the page cache) still counts, and at keep_last 1 the step before it goes.
  std::vector<std::string> apply_retention(int keep_last, const std::string& just_committed = "");

 private:
  struct Inspection;
  Inspection inspect(const std::string& dir, bool keep_files) const;
  void ensure_root();

  std::string root_;
  fs::FileSystem* fs_;
};

}  // namespace anchor::checkpoint
