#pragma once
// A checkpoint directory as a complete verification saw it, so that another
// process of the same run can count it verified without reading it again
// (docs/checkpoints.md, "Verified once"). Torch-free.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::checkpoint {

// One entry of a directory (or the directory itself, with an empty name) as
// lstat(2) gave it.
struct EntryIdentity {
  std::string name;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  std::uint32_t mode = 0;
  bool operator==(const EntryIdentity& o) const;
  bool operator!=(const EntryIdentity& o) const { return !(*this == o); }
};

// A step directory and every entry in it (regular files only), taken before a
// complete verification read its files and found the same after it
// (Store::restore_newest fills Loaded::verified so). Finding them all the same
// again later means no byte was written through write(2) or truncate and no
// entry added, removed or renamed since: each of those changes the ctime of
// what it touches, and utimensat cannot set a ctime. What this does not see,
// and the run directory is assumed free of: a privileged process that steps
// the clock back before writing, writes to the block device beneath the file
// system, or stores through a shared mapping made writable before the view.
// No view is taken on file systems whose attributes may be cached or made up
// (NFS, FUSE, 9p, SMB), nor while any ctime is within kRacyMarginNs of now.
struct VerifiedDir {
  static constexpr std::int64_t kRacyMarginNs = 100'000'000;  // 100 ms

  EntryIdentity dir;                   // the directory itself (name: its last component)
  std::vector<EntryIdentity> entries;  // sorted by name

  bool empty() const { return entries.empty(); }
  bool operator==(const VerifiedDir& o) const { return dir == o.dir && entries == o.entries; }
  // The directory as it is now; nullopt when it or an entry cannot be
  // examined, an entry is not a regular file, or a name is not valid UTF-8
  // (it could not travel as JSON).
  static std::optional<VerifiedDir> of(const std::string& dir);
  // of(dir), taken before a verification reads it: nullopt also on a file
  // system named above, or when a ctime is within kRacyMarginNs of now.
  static std::optional<VerifiedDir> before_verification(const std::string& dir);
  // `dir` is this very directory with the very same entries now.
  bool still_matches(const std::string& dir) const;
  std::uint64_t regular_bytes() const;  // the sizes of its regular files, summed

  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming the field that is missing or wrong.
  static VerifiedDir from_json(const nlohmann::json& j);
};

}  // namespace anchor::checkpoint
