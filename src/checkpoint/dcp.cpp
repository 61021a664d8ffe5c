#include "anchor/checkpoint/dcp.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "anchor/common/fs.hpp"
#include "anchor/common/units.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "pickle.hpp"

namespace anchor::checkpoint {

namespace stdfs = std::filesystem;
using pickle::Ref;
using Kind = pickle::Value::Kind;

namespace {

constexpr std::uint64_t kMaxMetadata = 1ULL << 30;
constexpr std::size_t kMaxProblems = 20;
constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

// lstat: a symlink is not followed (nor is its target's size taken).
bool regular_file(const std::string& path, std::uint64_t& size, std::string& why) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    why = "is missing";
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    why = S_ISLNK(st.st_mode) ? "is a symbolic link (anchor checks only regular files)" : "is not a regular file";
    return false;
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return true;
}

// A name FileSystemWriter writes: one path component, no way out of the directory.
bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

std::string fqn_of(const Ref& index) {
  const Ref fqn = index ? index->field("fqn") : nullptr;
  return fqn && fqn->is(Kind::kStr) ? "'" + printable(fqn->s) + "'" : std::string("(an entry without its name)");
}

class Checker {
 public:
  explicit Checker(DcpVerification& v) : v_(v) {}

  void problem(std::string p) {
    if (v_.problems.size() < kMaxProblems)
      v_.problems.push_back(std::move(p));
    else if (v_.problems.size() == kMaxProblems)
      v_.problems.push_back("(more problems not listed)");
  }

  // One storage_data entry: MetadataIndex -> _StorageInfo(relative_path, offset, length).
  void item(const Ref& index, const Ref& info) {
    ++v_.items;
    const std::string what = fqn_of(index);
    if (!info || info->kind != Kind::kObject) {
      problem(what + ": its storage record is not an object .metadata names");
      return;
    }
    const Ref path = info->field("relative_path"), offset = info->field("offset"), length = info->field("length");
    if (!path || !path->is(Kind::kStr) || !offset || !offset->is(Kind::kInt) || !length || !length->is(Kind::kInt)) {
      problem(what + ": its storage record lacks relative_path, offset or length (not FileSystemWriter's layout)");
      return;
    }
    if (!plain_name(path->s)) {
      problem(what + ": stored in " + printable(path->s) + ", a path outside the checkpoint directory");
      return;
    }
    if (offset->i < 0 || length->i < 0) {
      problem(what + ": a negative offset or length in " + printable(path->s));
      return;
    }
    auto& f = files_[path->s];
    ++f.items;
    const auto end = static_cast<std::uint64_t>(offset->i) + static_cast<std::uint64_t>(length->i);
    if (end > f.extent) {
      f.extent = end;
      f.last = what;
    }
  }

  // Each named file is there, regular, and holds every item placed in it.
  void files(const std::string& dir) {
    for (auto& [name, f] : files_) {
      std::string why;
      if (!regular_file(dir + "/" + name, f.file.bytes, why)) {
        problem(printable(name) + " " + why + ": .metadata places " + std::to_string(f.items) +
                (f.items == 1 ? " item" : " items") + " in it (" + f.last + " among them)");
      } else if (f.file.bytes < f.extent) {
        problem(printable(name) + " holds " + std::to_string(f.file.bytes) + " bytes, but " + f.last +
                " ends at byte " + std::to_string(f.extent) + " of it: the file was cut short");
      }
      f.file.name = printable(name);
      f.file.items = f.items;
      f.file.extent = f.extent;
      v_.bytes += f.file.bytes;
      v_.files.push_back(f.file);
    }
    std::error_code ec;
    for (stdfs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n != ".metadata" && !files_.count(n)) v_.unlisted.push_back(printable(n));
    }
    std::sort(v_.unlisted.begin(), v_.unlisted.end());
  }

 private:
  struct Placed {
    DcpFile file;
    std::uint64_t items = 0, extent = 0;
    std::string last;  // the entry that reaches furthest into the file
  };
  DcpVerification& v_;
  std::map<std::string, Placed> files_;
};

}  // namespace

bool is_dcp_dir(const std::string& dir) {
  std::error_code ec;
  if (stdfs::exists(stdfs::path(dir) / "manifest.json", ec)) return false;
  if (stdfs::is_regular_file(stdfs::path(dir) / ".metadata", ec)) return true;
  for (stdfs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))  // a save cut before .metadata
    if (it->path().extension() == ".distcp") return true;
  return false;
}

DcpVerification verify_dcp(const std::string& dir) {
  DcpVerification v;
  v.dir = dir;
  Checker check(v);
  std::uint64_t size = 0;
  std::string why;
  if (!regular_file(dir + "/.metadata", size, why)) {
    check.problem(".metadata " + why + ": DCP writes it last, so the save did not finish");
    return v;
  }
  if (size > kMaxMetadata) {
    check.problem(".metadata is " + human_bytes(double(size)) + ", more than the 1 GiB anchor reads");
    return v;
  }
  v.bytes = size;
  Ref root;
  try {
    root = pickle::load(fs::read_file(dir + "/.metadata"));
  } catch (const pickle::Invalid& e) {
    check.problem(".metadata is not a pickle anchor can read " + std::string(e.what()));
    return v;
  } catch (const Error& e) {
    check.problem(".metadata: " + std::string(e.what()));
    return v;
  }
  if (!root->instance_of(kMetadataModule, "Metadata")) {
    check.problem(".metadata does not hold a torch.distributed.checkpoint Metadata object");
    return v;
  }
  const Ref entries = root->field("state_dict_metadata"), storage = root->field("storage_data");
  if (entries && entries->is(Kind::kDict)) v.entries = entries->entries.size();
  if (!storage || !storage->is(Kind::kDict)) {
    check.problem(".metadata has no storage_data: it does not say where the state is stored");
    return v;
  }
  for (const auto& [index, info] : storage->entries) check.item(index, info);
  if (v.entries > 0 && v.items == 0) check.problem(".metadata lists state but stores none of it");
  check.files(dir);
  v.ok = v.problems.empty();
  return v;
}

nlohmann::json DcpVerification::to_json() const {
  nlohmann::json fl = nlohmann::json::array();
  for (const auto& f : files)
    fl.push_back({{"name", f.name}, {"bytes", f.bytes}, {"items", f.items}, {"extent", f.extent}});
  return {{"dir", printable(dir)},
          {"format", "torch.distributed.checkpoint"},
          {"ok", ok},
          {"entries", entries},
          {"items", items},
          {"files", fl},
          {"unlisted", unlisted},
          {"bytes", bytes},
          {"problems", problems}};
}

std::string DcpVerification::summary() const {
  return std::to_string(files.size()) + (files.size() == 1 ? " shard file, " : " shard files, ") +
         std::to_string(entries) + (entries == 1 ? " entry in " : " entries in ") + std::to_string(items) +
         (items == 1 ? " item, " : " items, ") + human_bytes(double(bytes));
}

}  // namespace anchor::checkpoint
