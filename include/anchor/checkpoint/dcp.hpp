#pragma once
// A torch.distributed.checkpoint (DCP) directory, checked without torch and
// without running its pickle (docs/checkpoints.md, "A DCP checkpoint"):
// `.metadata` is read as data (checkpoint/pickle.hpp), and every storage
// item it lists must lie inside a shard file of the directory. With the
// digests a pilot's report pinned, every file is checked by SHA-256 too.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::checkpoint {

// Whether `dir` holds a `.metadata` file or a `*.distcp` shard, and no anchor
// manifest.json: a DCP save (FileSystemWriter's layout, finished or not)
// rather than one of anchor's step dirs.
bool is_dcp_dir(const std::string& dir);

struct DcpFile {
  std::string name;          // relative to the directory, e.g. "__0_0.distcp"
  std::uint64_t bytes = 0;   // its size on disk (0 when missing)
  std::uint64_t items = 0;   // storage items .metadata places in it
  std::uint64_t extent = 0;  // the end of the last of them (offset + length)
};

struct DcpVerification {
  std::string dir;
  bool ok = false;
  std::uint64_t entries = 0;          // state_dict entries (tensors and objects) .metadata describes
  std::uint64_t items = 0;            // storage items (tensor chunks and pickled objects)
  std::vector<DcpFile> files;         // every shard file .metadata names
  std::vector<std::string> unlisted;  // files in the directory .metadata does not name (not read by a load)
  std::uint64_t bytes = 0;            // .metadata and every named file
  std::vector<std::string> problems;  // each says what and where; empty when ok
  nlohmann::json to_json() const;
  // "2 shard files, 9 entries in 14 items, 1.2 MiB"
  std::string summary() const;
};

// Reads `dir`/.metadata (at most 1 GiB) and checks every storage item's file,
// offset and length against the files there. Never throws for what it finds
// in the directory: each finding is a problem.
DcpVerification verify_dcp(const std::string& dir);

}  // namespace anchor::checkpoint
