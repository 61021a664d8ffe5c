#pragma once
// Copying a set of files somewhere else, and proving they arrived (the pilot's
// copy_off stage, docs/models.md "Copy off the node"; usable for any
// directory of files with known digests).
#include <cstdint>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"

namespace anchor::fs {

struct KnownFile {
  // Its path within the directory: '/'-separated, relative, no empty, "." or
  // ".." component (a name cannot leave the directory).
  std::string name;
  std::uint64_t size = 0;
  std::string sha256;  // lowercase hex
  std::string source;  // copy_verified: where to read it; empty: <from>/<name>
};

// Whether `name` is a KnownFile name: '/'-separated, relative, with no empty,
// "." or ".." component (so it cannot leave the directory it is joined to).
bool is_name_within(const std::string& name);

struct CopyResult {
  std::uint64_t bytes = 0;
  double copy_s = 0;    // reading, writing and fsyncing every file, and publishing the directory
  double verify_s = 0;  // reading every file back at the destination (before publishing) and hashing it
};

// Copies `files` from the directory `from` (or each from its `source`) into
// the new directory `to`: every file is written into a sibling temporary
// directory of `to` (the directories its name needs made there), hashed as it
// is read (a source that is not what `files` says is refused), fsynced and
// dropped from the page cache; every directory made is fsynced; every file
// is read back there and checked (verify_files: the bytes come from the
// destination's storage, not the cache); only then is the temporary directory
// renamed to `to` and the parent fsynced, so `to` appears whole and verified
// or not at all. `to`'s parent must exist (a destination that is not
// there, say an unmounted share, is refused rather than created) and `to`
// must not (nothing at a destination is ever replaced). Throws Error (kIo)
// naming the path and the reason, (kVerification) for a digest that differs;
// the temporary directory is removed on failure.
CopyResult copy_verified(const std::string& from, const std::vector<KnownFile>& files, const std::string& to,
                         FileSystem& fs = real_fs());

// Reads every file of `files` in `dir` and compares its size and SHA-256.
// Throws Error (kVerification) naming the first file that differs, with both
// digests.
void verify_files(const std::string& dir, const std::vector<KnownFile>& files);

}  // namespace anchor::fs
