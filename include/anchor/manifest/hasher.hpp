#pragma once
// Parallel, streaming, cached SHA-256 of many files (the work behind `anchor pin`).
//
// hash_files() runs a small pool of threads over the files (largest first), each
// streaming its file through anchor::sha256_file with a 1 MiB buffer, so memory
// stays constant whatever the input size. A HashCache keyed by (absolute path,
// size, mtime ns, inode, device) lets unchanged files skip the read entirely.
// docs/manifest.md describes the cache file and its invalidation rules.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace anchor::manifest {

// A file changed this recently is not cached: a write landing in the same
// coarse-clock tick as the mtime cached would leave size and mtime unchanged
// (the "racy clean" rule, docs/manifest.md, "The hash cache"); 100 ms is far
// above any kernel tick. The hash cache's and the process facts' rule.
inline constexpr std::int64_t kRacyWindowNs = 100'000'000;

// Identity of a file's contents as the cache sees it.
struct FileKey {
  std::string path;  // canonical absolute path (realpath)
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;  // st_mtim as nanoseconds since the epoch
  std::uint64_t inode = 0;
  std::uint64_t dev = 0;
};

// The on-disk hash cache: one JSON file ("anchor.hashcache/v1"), written with
// fs::atomic_write_file. Thread-safe. A missing file is an empty cache; a
// corrupt or foreign file is ignored with a warning (never fatal) and replaced
// on the next save().
class HashCache {
 public:
  // Loads `file` (see default_file()).
  explicit HashCache(std::string file);

  // $ANCHOR_CACHE_DIR, else $XDG_CACHE_HOME/anchor, else $HOME/.cache/anchor,
  // each + "/hash-cache.json". Throws Error (kConfig) when none of them is set.
  static std::string default_file();

  // The digest stored for exactly this key, if any.
  std::optional<std::string> lookup(const FileKey& key) const;
  void store(const FileKey& key, const std::string& sha256);

  // Merges with the file's current contents (entries of this object win; other
  // processes' entries are kept unless they name the same path) and writes it
  // atomically, creating the directory. Throws Error (kIo) on failure; callers
  // treat that as a warning.
  void save();

  const std::string& file() const { return file_; }
  std::size_t size() const;
  bool loaded_ok() const { return loaded_ok_; }  // false when the file was corrupt

 private:
  struct Entry {
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;
    std::uint64_t inode = 0;
    std::uint64_t dev = 0;
    std::string sha256;
  };
  static std::map<std::string, Entry> parse(const std::string& text, bool* ok);

  std::string file_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, Entry> dirty_;  // stored by this object, to merge on save
  bool loaded_ok_ = true;
};

// One file to hash. `label` (e.g. "data.train 'shards/a.bin'") prefixes any
// error message so the user sees which config entry named the file.
struct HashInput {
  std::string path;
  std::string label;
};

struct HashResult {
  std::string path;      // as given in HashInput
  std::string resolved;  // canonical absolute path (symlinks followed)
  std::uint64_t size = 0;
  std::string sha256;
  bool cached = false;  // digest came from the cache, the file was not read
};

struct HashStats {
  int threads = 0;
  std::size_t files_hashed = 0;
  std::size_t files_cached = 0;
  std::uint64_t bytes_hashed = 0;
  std::uint64_t bytes_cached = 0;
  double seconds = 0;
};

struct HashOptions {
  int threads = 0;             // 0 -> std::thread::hardware_concurrency()
  HashCache* cache = nullptr;  // nullptr -> every file is read
  bool progress = true;        // a progress line on stderr, only when stderr is a
                               // terminal and hashing takes longer than 1 s
};

// Number of worker threads used when HashOptions::threads is 0.
int default_threads();

// Hashes every input (duplicates, after resolving symlinks, are read once) and
// returns one result per input, in input order.
// Throws Error naming the path (and label): kIo for a missing, unreadable or
// non-regular file, a directory, a symlink loop (ELOOP), or a file that changed
// while it was hashed. When several files fail, the first in input order wins.
// A file is stored in the cache only when its mtime is more than 100 ms older
// than the moment its hashing started (a later write in the same mtime tick
// could otherwise go unnoticed) and its identity did not change while hashed.
std::vector<HashResult> hash_files(const std::vector<HashInput>& inputs, const HashOptions& opts = {},
                                   HashStats* stats = nullptr);

// The digest over a set of files: SHA-256 of the lines "<sha256>  <path>\n"
// sorted bytewise, i.e. `sha256sum FILES | LC_ALL=C sort | sha256sum`.
// Each pair is (sha256, path-as-written).
std::string set_digest(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace anchor::manifest
