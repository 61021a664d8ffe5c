#include "anchor/checkpoint/verified_dir.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "anchor/common/utf8.hpp"

namespace anchor::checkpoint {
namespace {

std::int64_t ns_of(const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec; }

std::optional<EntryIdentity> identity_of(const std::string& path, std::string name) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  EntryIdentity e;
  e.name = std::move(name);
  e.dev = static_cast<std::uint64_t>(st.st_dev);
  e.ino = static_cast<std::uint64_t>(st.st_ino);
  e.size = static_cast<std::uint64_t>(st.st_size);
  e.mtime_ns = ns_of(st.st_mtim);
  e.ctime_ns = ns_of(st.st_ctim);
  e.mode = static_cast<std::uint32_t>(st.st_mode);
  return e;
}

// The names in `dir` but . and ..; nullopt when it cannot be listed.
std::optional<std::vector<std::string>> names_in(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json entry_json(const EntryIdentity& e) {
  return {{"name", e.name},         {"dev", e.dev},           {"ino", e.ino},  {"size", e.size},
          {"mtime_ns", e.mtime_ns}, {"ctime_ns", e.ctime_ns}, {"mode", e.mode}};
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw std::invalid_argument(where + "." + key + " is missing");
  const auto& v = j.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) throw std::invalid_argument(where + "." + key + " is not a string");
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::numeric_limits<T>::max())
      throw std::invalid_argument(where + "." + key + " is not a non-negative integer of its range");
  } else {
    if (!v.is_number_integer()) throw std::invalid_argument(where + "." + key + " is not an integer");
  }
  return v.get<T>();
}

EntryIdentity entry_of(const nlohmann::json& j, const std::string& where) {
  EntryIdentity e;
  e.name = field<std::string>(j, "name", where);
  e.dev = field<std::uint64_t>(j, "dev", where);
  e.ino = field<std::uint64_t>(j, "ino", where);
  e.size = field<std::uint64_t>(j, "size", where);
  e.mtime_ns = field<std::int64_t>(j, "mtime_ns", where);
  e.ctime_ns = field<std::int64_t>(j, "ctime_ns", where);
  e.mode = field<std::uint32_t>(j, "mode", where);
  return e;
}

}  // namespace

bool EntryIdentity::operator==(const EntryIdentity& o) const {
  return name == o.name && dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
         ctime_ns == o.ctime_ns && mode == o.mode;
}

namespace {

// File systems whose attributes a client may cache or a daemon make up (NFS:
// lstat can answer from attributes cached for up to a minute; FUSE, 9p, SMB):
// no view is taken there, and every checkpoint is read.
bool attributes_may_be_stale(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return true;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0x6969UL:      // NFS
    case 0x65735546UL:  // FUSE
    case 0x01021997UL:  // 9p (v9fs)
    case 0xFF534D42UL:  // CIFS
    case 0xFE534D42UL:  // SMB2
    case 0x517BUL:      // SMB
      return true;
    default: return false;
  }
}

}  // namespace

std::optional<VerifiedDir> VerifiedDir::before_verification(const std::string& dir) {
  if (attributes_may_be_stale(dir)) return std::nullopt;
  auto v = of(dir);
  if (!v) return std::nullopt;
  // Every ctime older than now by a margin: a write after this moment then
  // cannot land in the same coarse clock tick as a recorded ctime and leave it
  // unchanged (git's "racy clean"; the hash cache's rule, docs/manifest.md).
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const std::int64_t cutoff = ns_of(now) - kRacyMarginNs;
  if (v->dir.ctime_ns >= cutoff) return std::nullopt;
  for (const auto& e : v->entries)
    if (e.ctime_ns >= cutoff) return std::nullopt;
  return v;
}

std::optional<VerifiedDir> VerifiedDir::of(const std::string& dir) {
  const auto slash = dir.find_last_of('/');
  auto self = identity_of(dir, slash == std::string::npos ? dir : dir.substr(slash + 1));
  if (!self || !S_ISDIR(self->mode) || !is_valid_utf8(self->name)) return std::nullopt;
  const auto names = names_in(dir);
  if (!names) return std::nullopt;
  VerifiedDir v;
  v.dir = *self;
  for (const auto& n : *names) {
    auto e = identity_of(dir + "/" + n, n);
    // Only regular files: a verification reads a link's target, whose changes
    // the link's own identity would not show.
    if (!e || !S_ISREG(e->mode) || !is_valid_utf8(n)) return std::nullopt;
    v.entries.push_back(std::move(*e));
  }
  return v;
}

bool VerifiedDir::still_matches(const std::string& dir) const {
  if (empty()) return false;  // nothing was seen: nothing to vouch for
  const auto now = of(dir);
  return now && *now == *this;
}

std::uint64_t VerifiedDir::regular_bytes() const {
  std::uint64_t n = 0;
  for (const auto& e : entries)
    if (S_ISREG(e.mode)) n += e.size;
  return n;
}

nlohmann::json VerifiedDir::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : entries) list.push_back(entry_json(e));
  return {{"dir", entry_json(dir)}, {"entries", list}};
}

VerifiedDir VerifiedDir::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("verified directory: not an object");
  VerifiedDir v;
  v.dir = entry_of(j.contains("dir") ? j.at("dir") : nlohmann::json(), "dir");
  if (!j.contains("entries") || !j.at("entries").is_array() || j.at("entries").empty())
    throw std::invalid_argument("entries is missing, not an array, or empty");
  for (std::size_t i = 0; i < j.at("entries").size(); ++i)
    v.entries.push_back(entry_of(j.at("entries")[i], "entries[" + std::to_string(i) + "]"));
  if (!std::is_sorted(v.entries.begin(), v.entries.end(),
                      [](const EntryIdentity& a, const EntryIdentity& b) { return a.name < b.name; }))
    throw std::invalid_argument("entries are not sorted by name");
  return v;
}

}  // namespace anchor::checkpoint
