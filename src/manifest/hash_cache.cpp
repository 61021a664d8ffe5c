#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/hasher.hpp"

namespace anchor::manifest {
namespace {

constexpr const char* kCacheFormat = "anchor.hashcache/v1";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::string HashCache::default_file() {
  std::string dir = env_or_empty("ANCHOR_CACHE_DIR");
  if (dir.empty()) {
    std::string xdg = env_or_empty("XDG_CACHE_HOME");
    if (!xdg.empty()) dir = xdg + "/anchor";
  }
  if (dir.empty()) {
    std::string home = env_or_empty("HOME");
    if (!home.empty()) dir = home + "/.cache/anchor";
  }
  if (dir.empty())
    throw Error(ErrorKind::kConfig,
                "hash cache: no cache directory (ANCHOR_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset)",
                "set ANCHOR_CACHE_DIR, or pass --no-cache");
  return dir + "/hash-cache.json";
}

std::map<std::string, HashCache::Entry> HashCache::parse(const std::string& text, bool* ok) {
  std::map<std::string, Entry> out;
  *ok = false;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kCacheFormat || !j.contains("entries") ||
      !j["entries"].is_object())
    return out;
  for (const auto& [path, e] : j["entries"].items()) {
    if (!e.is_object()) return {};
    const auto& sha = e.find("sha256");
    const auto& size = e.find("size");
    const auto& mtime = e.find("mtime_ns");
    const auto& ino = e.find("inode");
    const auto& dev = e.find("dev");
    if (sha == e.end() || size == e.end() || mtime == e.end() || ino == e.end() || dev == e.end() ||
        !sha->is_string() || !size->is_number_unsigned() || !mtime->is_number_integer() || !ino->is_number_unsigned() ||
        !dev->is_number_unsigned() || !is_sha256_hex(sha->get<std::string>()))
      return {};
    out[path] = Entry{size->get<std::uint64_t>(), mtime->get<std::int64_t>(), ino->get<std::uint64_t>(),
                      dev->get<std::uint64_t>(), sha->get<std::string>()};
  }
  *ok = true;
  return out;
}

namespace {

// The cache file's bytes; nullopt when there is none yet. Anything else that
// cannot be read (a FIFO or directory in its place: refused, never waited on)
// is logged and treated as no cache: it is rewritten on the next save.
std::optional<std::string> read_cache_file(const std::string& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  try {
    return fs::read_file(file);
  } catch (const Error& e) {
    ANCHOR_LOG_WARN("pin", "hash cache {} cannot be read ({}); ignoring it (it is rewritten on the next pin)", file,
                    e.what());
    return std::nullopt;
  }
}

}  // namespace

HashCache::HashCache(std::string file) : file_(std::move(file)) {
  const auto text = read_cache_file(file_);
  if (!text) return;  // no cache yet: empty
  bool ok = false;
  entries_ = parse(*text, &ok);
  if (!ok) {
    loaded_ok_ = false;
    ANCHOR_LOG_WARN("pin",
                    "hash cache {} is corrupt or not an anchor hash cache; ignoring it "
                    "(it is rewritten on the next pin)",
                    file_);
  }
}

std::optional<std::string> HashCache::lookup(const FileKey& key) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key.path);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  if (e.size != key.size || e.mtime_ns != key.mtime_ns || e.inode != key.inode || e.dev != key.dev) return std::nullopt;
  return e.sha256;
}

void HashCache::store(const FileKey& key, const std::string& sha256) {
  std::lock_guard<std::mutex> lk(mu_);
  Entry e{key.size, key.mtime_ns, key.inode, key.dev, sha256};
  entries_[key.path] = e;
  dirty_[key.path] = e;
}

std::size_t HashCache::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_.size();
}

void HashCache::save() {
  std::lock_guard<std::mutex> lk(mu_);
  // Another process may have pinned other files since we loaded: keep theirs.
  std::map<std::string, Entry> merged;
  if (const auto text = read_cache_file(file_)) {
    bool ok = false;
    merged = parse(*text, &ok);
  }
  for (const auto& [p, e] : entries_) merged.emplace(p, e);  // fill what the file lacks
  for (const auto& [p, e] : dirty_) merged[p] = e;           // ours win
  // Drop entries that can no longer hit (file gone or changed) so the cache
  // does not grow without bound.
  for (auto it = merged.begin(); it != merged.end();) {
    struct stat st {};
    const Entry& e = it->second;
    bool live = ::stat(it->first.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == e.size &&
                static_cast<std::uint64_t>(st.st_ino) == e.inode && static_cast<std::uint64_t>(st.st_dev) == e.dev &&
                static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec == e.mtime_ns;
    it = live ? std::next(it) : merged.erase(it);
  }
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [p, e] : merged) {
    // The cache is JSON keyed by path: a path that is not UTF-8 cannot be a
    // key as it is (and \xNN would not find the file again). Such a file is
    // hashed on every pin instead; everything else is cached as before.
    if (!is_valid_utf8(p)) continue;
    entries[p] = {{"sha256", e.sha256}, {"size", e.size}, {"mtime_ns", e.mtime_ns}, {"inode", e.inode}, {"dev", e.dev}};
  }
  nlohmann::json j = {{"format", kCacheFormat}, {"entries", std::move(entries)}};

  std::filesystem::path dir = std::filesystem::path(file_).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) throw io_error("mkdir", dir.string(), ec.value());
  fs::atomic_write_file(file_, j.dump() + "\n");
  entries_ = std::move(merged);
  dirty_.clear();
}

}  // namespace anchor::manifest
