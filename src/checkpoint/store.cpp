#include "anchor/checkpoint/store.hpp"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace anchor::checkpoint {

using nlohmann::json;
namespace stdfs = std::filesystem;

namespace {

constexpr const char* kState = "state.json";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kCommitted = "COMMITTED";
// The most a reader takes of manifest.json (or COMMITTED) before it declines
// to read it: a manifest lists ~100 bytes a file, or a tensor pinned apart.
constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;

enum class DirKind { kStep, kTemp, kTrash, kOther };

struct DirName {
  DirKind kind = DirKind::kOther;
  std::int64_t step = -1;
};

// step-<digits>[.tmp-<x>|.trash-<x>]
DirName parse_dir_name(const std::string& name) {
  DirName d;
  if (name.rfind("step-", 0) != 0) return d;
  std::size_t i = 5, j = i;
  while (j < name.size() && j - i < 18 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i) return d;
  std::int64_t step = std::stoll(name.substr(i, j - i));
  std::string rest = name.substr(j);
  if (rest.empty())
    d.kind = DirKind::kStep;
  else if (rest.rfind(".tmp-", 0) == 0)
    d.kind = DirKind::kTemp;
  else if (rest.rfind(".trash-", 0) == 0)
    d.kind = DirKind::kTrash;
  else
    return d;
  d.step = step;
  return d;
}

std::string join(const std::string& a, const std::string& b) { return a + "/" + b; }

// Writes bytes to a new file through the seam, hashing while streaming.
FileDigest write_bytes(fs::FileSystem& fs, const std::string& path, const std::string& bytes) {
  fs::UniqueFd fd = fs.create_excl(path, 0644);
  try {
    fs.write_all(fd.get(), bytes.data(), bytes.size(), path);
    fs.fsync(fd.get(), path);
    fs.close(std::move(fd), path);
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  return FileDigest{sha256_hex(bytes), bytes.size()};
}

struct Fault {
  std::string point;
  std::optional<std::int64_t> step;
  bool sigkill = false;
};

// The points of a save, in order (docs/checkpoints.md): "after_file:<f>" for
// each file of the request and state.json; "after_remote_files" only when
// other processes write files.
std::vector<std::string> fault_points(const SaveRequest& req) {
  std::vector<std::string> p = {"begin", "after_mkdir"};
  for (const auto& f : req.files) p.push_back("after_file:" + f.filename);
  if (req.remote.collect) p.push_back("after_remote_files");
  for (const char* n : {"after_file:state.json", "after_manifest", "after_committed", "after_dir_fsync", "after_rename",
                        "after_parent_fsync", "done"})
    p.push_back(n);
  return p;
}

// ANCHOR_FAULT for this save. A value that is malformed or names a point
// this save never reaches is a usage error: a typo must not make a fault test
// pass by never firing.
std::optional<Fault> fault_from_env(const SaveRequest& req) {
  const char* env = std::getenv(kFaultEnv);
  if (!env || !*env) return std::nullopt;
  std::string s = env;
  auto colon = s.rfind(':');
  auto bad = [&](const std::string& why, const std::string& hint = {}) {
    return Error(
        ErrorKind::kUsage, std::string(kFaultEnv) + "='" + printable(s) + "': " + why,
        hint.empty() ? "use <point>:<exit|sigkill> or <point>@<step>:<exit|sigkill> (docs/checkpoints.md)" : hint);
  };
  if (colon == std::string::npos) throw bad("missing ':<exit|sigkill>'");
  Fault f;
  std::string action = s.substr(colon + 1);
  if (action == "sigkill")
    f.sigkill = true;
  else if (action != "exit")
    throw bad("action '" + printable(action) + "' is not exit or sigkill");
  f.point = s.substr(0, colon);
  auto at = f.point.rfind('@');
  if (at != std::string::npos) {
    std::string st = f.point.substr(at + 1);
    if (st.empty() || st.size() > 18 || st.find_first_not_of("0123456789") != std::string::npos)
      throw bad("step '" + printable(st) + "' is not a number");
    f.step = std::stoll(st);
    f.point = f.point.substr(0, at);
  }
  if (f.point.empty()) throw bad("empty point");
  const auto known = fault_points(req);
  if (std::find(known.begin(), known.end(), f.point) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw bad("unknown point '" + printable(f.point) + "': a save of step " + std::to_string(req.step) +
                  " never reaches it, so the fault would never fire",
              "use one of the points of this save: " + list + " (docs/checkpoints.md, \"The fault seam\")");
  }
  return f;
}

std::string errno_hint(const Error& e) {
  std::string w = e.what();
  if (w.find("ENOSPC") != std::string::npos || w.find("EFBIG") != std::string::npos ||
      w.find("EDQUOT") != std::string::npos)
    return "free space on the checkpoint file system (or lower retention); the previous "
           "checkpoint is intact";
  if (w.find("EIO") != std::string::npos)
    return "the storage reported an I/O error; check the device (dmesg). The previous "
           "checkpoint is intact";
  return e.hint().empty() ? "the previous checkpoint is intact" : e.hint();
}

// A file name a save may write: a plain name, not one of the store's own.
bool is_plain_file_name(const std::string& n) {
  return !(n.empty() || n.find('/') != std::string::npos || n[0] == '.' || n == kState || n == kManifest ||
           n == kCommitted);
}

// The request's checks, in order, before anything touches the disk: the step,
// the file names (collected into `names`), the state. Returns the state with
// its "step".
json validated_state(const SaveRequest& req, const std::string& prefix, std::set<std::string>& names) {
  auto usage = [&](const std::string& why) { return Error(ErrorKind::kUsage, prefix + why); };
  if (req.step < 0) throw usage("step must be >= 0");
  for (const auto& f : req.files) {
    const std::string& n = f.filename;
    if (!is_plain_file_name(n))
      throw usage("invalid file name '" + n + "' (a plain name, not state.json/manifest.json/COMMITTED)");
    if (!names.insert(n).second) throw usage("file '" + n + "' given twice");
  }
  json state = req.state.is_null() ? json::object() : req.state;
  if (!state.is_object()) throw usage("state must be a JSON object");
  if (state.contains("step") && state["step"] != json(req.step))
    throw usage("state.step is " + state["step"].dump() + ", expected " + std::to_string(req.step));
  state["step"] = req.step;
  return state;
}

// One save in progress: what its steps share.
struct SaveRun {
  SaveRun(fs::FileSystem& file_system, const SaveRequest& request, const Hook& on_point, std::string error_prefix)
      : fs(file_system), req(request), hook(on_point), prefix(std::move(error_prefix)) {}

  fs::FileSystem& fs;
  const SaveRequest& req;
  const Hook& hook;
  std::string prefix;           // of every error message of this save
  std::set<std::string> names;  // the files written so far, by name
  std::optional<Fault> fault;
  std::string final_dir;
  std::string tmp;
  bool tmp_created = false;
  enum { kNone, kRenamed, kExchanged } placed = kNone;
  json files = json::array();  // the manifest's entries
  SaveResult res;

  // A named point of the save: the hook, then the fault seam.
  void point(const std::string& name) const {
    if (hook) hook(name);
    if (fault && fault->point == name && (!fault->step || *fault->step == req.step)) {
      ANCHOR_LOG_WARN("checkpoint", "{}={}: {} at '{}' (fault seam)", kFaultEnv, std::getenv(kFaultEnv),
                      fault->sigkill ? "SIGKILL" : "exit", name);
      std::fflush(nullptr);
      if (fault->sigkill) ::raise(SIGKILL);
      ::_exit(kFaultExitCode);
    }
  }

  void record(const std::string& name, const FileDigest& d) {
    files.push_back({{"path", name}, {"size", d.size}, {"sha256", d.sha256}});
    res.bytes += d.size;
  }
  // A safetensors file pinned per tensor (manifest v2); `own`: this process
  // wrote it, and the caller gets its digests (SaveResult::digests).
  void record(const std::string& name, std::uint64_t size, TensorDigests d, bool own) {
    files.push_back({{"path", name}, {"size", size}, {"header_sha256", d.header}, {"tensors", d.tensors}});
    res.bytes += size;
    if (own) res.digests.emplace(name, std::move(d));
  }

  // Undo a placement that is not durable, then drop the temp dir.
  void cleanup() {
    try {
      if (placed == kExchanged) fs.exchange(tmp, final_dir);
      if (placed == kRenamed) {
        fs.rename(final_dir, tmp);
        tmp_created = true;
      }
    } catch (const Error& undo) {
      // step-N keeps the new, complete checkpoint; tmp may hold the previous
      // one: leave it on disk rather than delete it here.
      ANCHOR_LOG_ERROR("checkpoint", "undoing the placement of {} failed: {}", final_dir, undo.what());
      tmp_created = false;
    }
    if (tmp_created) {
      std::error_code ec;
      stdfs::remove_all(tmp, ec);
      if (ec) ANCHOR_LOG_WARN("checkpoint", "could not remove {}: {}", tmp, ec.message());
    }
  }
};

void write_request_files(SaveRun& run) {
  for (const auto& f : run.req.files) {
    const std::string path = join(run.tmp, f.filename);
    if (f.tensors.size() > kMaxTensorsPinnedApart) {
      run.record(f.filename, write_safetensors(run.fs, path, f.tensors, f.metadata));
    } else {
      TensorDigests td;
      const FileDigest d = write_safetensors(run.fs, path, f.tensors, f.metadata, &td);
      run.record(f.filename, d.size, std::move(td), true);
    }
    run.point("after_file:" + f.filename);
  }
}

// The files other processes wrote into the temp dir: each name checked, each
// size against what its writer reported.
void record_remote_files(SaveRun& run) {
  for (const auto& rf : run.req.remote.collect()) {
    const std::string& n = rf.filename;
    if (!is_plain_file_name(n) || !run.names.insert(n).second)
      throw Error(ErrorKind::kUsage, "remote file name '" + n + "' is invalid or given twice");
    std::error_code ec;
    const auto size = stdfs::file_size(join(run.tmp, n), ec);
    if (ec || size != rf.digest.size)
      throw Error(ErrorKind::kIo, "remote file " + join(run.tmp, n) +
                                      (ec ? " is missing: " + ec.message()
                                          : " has " + std::to_string(size) + " bytes, its writer reported " +
                                                std::to_string(rf.digest.size)));
    if (rf.tensors) {
      if (n.size() <= 12 || n.compare(n.size() - 12, 12, ".safetensors") != 0)
        throw Error(ErrorKind::kUsage, "remote file '" + n + "' is pinned per tensor but is not a .safetensors file");
      run.record(n, rf.digest.size, *rf.tensors, false);
    } else {
      run.record(n, rf.digest);
    }
  }
  run.point("after_remote_files");
}

// state.json, manifest.json, COMMITTED, then the temp dir's fsync.
// manifest.json's text. Files pinned per tensor each cost ~100 bytes a
// tensor: a save of very many tensors over several files (a small model's
// ZeRO shards over many ranks) could outgrow what a reader accepts, and then
// commit a checkpoint no restore takes. Then its largest per-tensor entries
// are pinned whole instead, reading those files back (once), until it fits.
std::string manifest_text(SaveRun& run) {
  const auto text = [&] {
    return json{{"format", kManifestFormat}, {"step", run.req.step}, {"files", run.files}}.dump(2) + "\n";
  };
  std::string t = text();
  if (t.size() <= kMaxManifestBytes) return t;
  std::vector<json*> apart;
  for (auto& e : run.files)
    if (e.contains("tensors")) apart.push_back(&e);
  std::stable_sort(apart.begin(), apart.end(),
                   [](const json* a, const json* b) { return (*a)["tensors"].size() > (*b)["tensors"].size(); });
  std::uint64_t freed = 0;
  for (json* e : apart) {
    const std::string name = (*e)["path"].get<std::string>();
    freed += 100 * (*e)["tensors"].size();  // about what its pins took
    *e = {{"path", name}, {"size", (*e)["size"]}, {"sha256", sha256_file(join(run.tmp, name)).sha256}};
    ANCHOR_LOG_WARN("checkpoint", "{}: pinned whole, not per tensor: the manifest would hold more than {} bytes", name,
                    kMaxManifestBytes);
    if (t.size() - std::min<std::uint64_t>(freed, t.size()) > kMaxManifestBytes) continue;
    t = text();
    if (t.size() <= kMaxManifestBytes) return t;
  }
  return text();
}

void write_commit_files(SaveRun& run, const json& state) {
  run.record(kState, write_bytes(run.fs, join(run.tmp, kState), state.dump(2) + "\n"));
  run.point(std::string("after_file:") + kState);

  const std::string mbytes = manifest_text(run);
  FileDigest md = write_bytes(run.fs, join(run.tmp, kManifest), mbytes);
  run.res.bytes += md.size;
  run.point("after_manifest");
  run.res.bytes += write_bytes(run.fs, join(run.tmp, kCommitted), md.sha256 + "\n").size;
  run.point("after_committed");
  run.fs.fsync_dir(run.tmp);
  run.point("after_dir_fsync");
}

// The temp dir becomes step-N (exchanged with an existing one), then the
// root's fsync makes that durable.
void place_step_dir(SaveRun& run, const std::string& root) {
  std::error_code ec;
  if (stdfs::exists(stdfs::symlink_status(run.final_dir, ec))) {
    run.fs.exchange(run.tmp, run.final_dir);  // tmp now holds the old step-N
    run.placed = SaveRun::kExchanged;
  } else {
    run.fs.rename(run.tmp, run.final_dir);
    run.placed = SaveRun::kRenamed;
    run.tmp_created = false;
  }
  run.point("after_rename");
  run.fs.fsync_dir(root);
  run.point("after_parent_fsync");
}

std::uint64_t dir_bytes(const std::string& dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (stdfs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) {
      auto s = it->file_size(e2);
      if (!e2) n += s;
    }
  }
  return n;
}

}  // namespace

std::string step_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

Store::Store(std::string root, fs::FileSystem& fs) : root_(std::move(root)), fs_(&fs) {
  if (root_.empty()) root_ = ".";
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

void Store::ensure_root() {
  // Create missing ancestors too, each made durable by fsyncing its parent.
  std::vector<stdfs::path> missing;
  std::error_code ec;
  for (stdfs::path p = stdfs::absolute(root_); !p.empty() && !stdfs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    fs_->mkdir(it->string(), 0755);
    fs_->fsync_dir(it->parent_path().string());
  }
  if (!stdfs::is_directory(root_, ec)) throw Error(ErrorKind::kIo, "checkpoint root " + root_ + " is not a directory");
}

SaveResult Store::save(const SaveRequest& req, const Hook& hook) {
  auto t0 = std::chrono::steady_clock::now();
  SaveRun run(*fs_, req, hook, "save checkpoint step " + std::to_string(req.step) + " in " + root_ + ": ");
  // Validate the request before touching the disk.
  const json state = validated_state(req, run.prefix, run.names);
  run.fault = fault_from_env(req);

  run.final_dir = join(root_, step_dir_name(req.step));
  run.tmp = run.final_dir + ".tmp-" + fs::random_suffix();
  try {
    run.point("begin");
    ensure_root();
    fs_->mkdir(run.tmp, 0755);
    run.tmp_created = true;
    run.point("after_mkdir");
    if (req.remote.announce) req.remote.announce(run.tmp);

    write_request_files(run);
    if (req.remote.collect) record_remote_files(run);
    write_commit_files(run, state);
    place_step_dir(run, root_);
  } catch (const Error& e) {
    run.cleanup();
    throw Error(e.kind(), run.prefix + e.what(), errno_hint(e));
  } catch (...) {  // e.g. std::system_error from a thread or bad_alloc: same cleanup
    run.cleanup();
    throw;
  }

  if (run.placed == SaveRun::kExchanged) {
    // The new step-N is durable; the old one sits at the temp name, which a
    // kill here leaves for remove_stale_temps.
    std::error_code ec;
    stdfs::remove_all(run.tmp, ec);
    if (ec) ANCHOR_LOG_WARN("checkpoint", "could not remove the replaced {}: {}", run.tmp, ec.message());
  }
  run.point("done");
  run.res.dir = run.final_dir;
  run.res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ANCHOR_LOG_INFO("checkpoint", "saved {} ({} bytes, {:.3f} s)", run.final_dir, run.res.bytes, run.res.seconds);
  return run.res;
}

namespace detail {
// What Store::inspect finds (Store::Inspection is this, by name). Not in the
// anonymous namespace: a type with linkage (Inspection) derives from it.
struct Found {
  Store::Verification v;
  json state;
  json manifest;
  std::map<std::string, SafetensorsFile> files;
  std::map<std::string, TensorDigests> digests;  // verified, of the files pinned per tensor
  VerifiedDir seen;                              // the directory as the verification saw it (restore only)
};
}  // namespace detail
using detail::Found;

struct Store::Inspection : Found {};

namespace {

// One file of a checkpoint's manifest: what the manifest says of it, and what
// reading it found.
struct FileCheck {
  std::string name, path, sha256;       // sha256: the whole file's, when the manifest pins it so
  std::optional<TensorDigests> pinned;  // or per tensor (a v2 entry of a safetensors file)
  std::uint64_t size = 0;
  bool is_safetensors = false, is_state = false;
  bool read = false;                      // the entry is well-formed and the file there: read and hash it
  unsigned hash_threads = 1;              // for a file pinned per tensor
  std::vector<std::string> problems;      // in the order found
  std::optional<json> state;              // state.json, parsed, when it checks out so far
  std::optional<SafetensorsFile> file;    // kept when asked to
  std::optional<TensorDigests> verified;  // `pinned`, once every digest matched
};

// `read()` of one listed file; a failure is its problem (nullopt).
template <class Read>
std::optional<FileBytes> read_for_check(FileCheck& c, const Read& read) {
  try {
    return read();
  } catch (const Error& e) {
    c.problems.push_back(c.name + ": cannot be read: " + e.what());
  } catch (const std::bad_alloc&) {
    c.problems.push_back(c.name + ": cannot be read: too large for memory");
  }
  return std::nullopt;
}

// The digests of a file pinned per tensor against the manifest's (named problems, at most 8 of each kind).
void compare_tensor_digests(FileCheck& c, const TensorDigests& got);

// A file pinned per tensor: read while its tensors are hashed on
// c.hash_threads, parsed (the tensors must tile the data section, so the
// header and the tensors cover every byte), then each digest compared with
// the manifest's.
void check_tensor_digests(FileCheck& c, bool keep) {
  std::optional<TensorDigests> hashed;  // while it was read
  std::optional<FileBytes> bytes =
      read_for_check(c, [&] { return FileBytes::read_hashing_tensors(c.path, c.hash_threads, &hashed); });
  if (!bytes) return;
  // As for a file pinned whole: a wrong size is named (and its digests are not
  // compared), and the file is still parsed, to say how it is damaged.
  const bool sized = bytes->size() == c.size;
  if (!sized)
    c.problems.push_back(c.name + ": size is " + std::to_string(bytes->size()) + " bytes, manifest.json says " +
                         std::to_string(c.size));
  std::optional<SafetensorsFile> sf;
  try {
    sf = SafetensorsFile::parse(std::move(*bytes), c.path);
  } catch (const Error& e) {
    c.problems.push_back(e.what());
    return;
  }
  if (!sized) return;
  const std::size_t before = c.problems.size();
  compare_tensor_digests(c, hashed ? std::move(*hashed) : hash_tensors(*sf, c.hash_threads));
  if (c.problems.size() != before) return;
  if (keep) c.file = std::move(*sf);
}

void compare_tensor_digests(FileCheck& c, const TensorDigests& got) {
  const TensorDigests& want = *c.pinned;
  const std::size_t before = c.problems.size();
  if (got.header != want.header)
    c.problems.push_back(c.name + ": header SHA-256 is " + got.header + ", manifest.json says " + want.header);
  // At most kNamed problems of each kind, then how many more: a crafted file
  // or manifest of a million names would otherwise make a reason of megabytes.
  constexpr std::size_t kNamed = 8;
  std::size_t missing = 0, changed = 0, unpinned = 0;
  const auto add = [&](std::size_t& count, const std::string& problem) {
    if (count++ < kNamed) c.problems.push_back(problem);
  };
  for (const auto& [tensor, hex] : want.tensors) {
    const auto it = got.tensors.find(tensor);
    if (it == got.tensors.end())
      add(missing, c.name + ": manifest.json pins tensor '" + tensor + "', which the file does not hold");
    else if (it->second != hex)
      add(changed, c.name + ": tensor '" + tensor + "' SHA-256 is " + it->second + ", manifest.json says " + hex);
  }
  for (const auto& [tensor, hex] : got.tensors)
    if (!want.tensors.count(tensor)) add(unpinned, c.name + ": tensor '" + tensor + "' is not pinned in manifest.json");
  for (const auto& [count, what] :
       {std::pair<std::size_t, const char*>{missing, "pinned tensors the file does not hold"},
        {changed, "tensors whose SHA-256 differs"},
        {unpinned, "tensors not pinned"}})
    if (count > kNamed) c.problems.push_back(c.name + ": and " + std::to_string(count - kNamed) + " more " + what);
  if (c.problems.size() == before) c.verified = want;
}

// The file's size, and its SHA-256 unless its tensors are pinned instead,
// against what manifest.json says.
void check_size_and_sha256(FileCheck& c, const FileDigest& d) {
  if (d.size != c.size)
    c.problems.push_back(c.name + ": size is " + std::to_string(d.size) + " bytes, manifest.json says " +
                         std::to_string(c.size));
  else if (!c.pinned && d.sha256 != c.sha256)
    c.problems.push_back(c.name + ": SHA-256 is " + d.sha256 + ", manifest.json says " + c.sha256);
}

// A check that keeps no file (verify, list, retention): one streamed read, the
// header and one chunk in memory whatever the file's size (stream_file).
void check_file_streamed(FileCheck& c) {
  std::optional<StreamedFile> s;
  try {
    s = stream_file(c.path, c.is_safetensors || c.pinned, c.pinned.has_value());
  } catch (const Error& e) {
    c.problems.push_back(c.name + ": cannot be read: " + e.what());
    return;
  }
  const bool sized = s->digest.size == c.size;
  check_size_and_sha256(c, s->digest);
  if (!s->problem.empty()) c.problems.push_back(s->problem);
  if (c.pinned && sized && s->tensors) compare_tensor_digests(c, *s->tensors);
}

// Reads, hashes and parses one file (FileBytes::read overlaps the hashing with
// the read), recording what is wrong with it.
void check_file(FileCheck& c, bool keep, std::int64_t dir_step) {
  if (!keep && !c.is_state) return check_file_streamed(c);
  if (c.pinned) return check_tensor_digests(c, keep);
  FileDigest d;
  std::optional<FileBytes> bytes = read_for_check(
      c, [&] { return c.is_safetensors ? FileBytes::read(c.path, &d) : FileBytes(read_file_hashed(c.path, &d)); });
  if (!bytes) return;
  check_size_and_sha256(c, d);  // not pinned: a pinned file's tensors were checked above
  if (c.is_state) {
    try {
      json s = parse_json(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
      if (!s.is_object())
        c.problems.push_back("state.json is not a JSON object");
      else if (!s.contains("step") || !s["step"].is_number_integer())
        c.problems.push_back("state.json has no integer step");
      else if (dir_step >= 0 && s["step"].get<std::int64_t>() != dir_step)
        c.problems.push_back("state.json step is " + s["step"].dump() + " but the directory is step " +
                             std::to_string(dir_step));
      else
        c.state = std::move(s);
    } catch (const json::exception& e) {
      c.problems.push_back(std::string("state.json is not valid JSON: ") + e.what());
    }
  } else if (c.is_safetensors) {
    try {
      SafetensorsFile sf = SafetensorsFile::parse(std::move(*bytes), c.path);
      if (keep) c.file = std::move(sf);
    } catch (const Error& e) {
      c.problems.push_back(e.what());
    }
  }
}

// check_file for every entry to read: largest first, across up to one thread
// per CPU (at most 8), since SHA-256 runs at one core's speed per stream; a
// file kept (restore) and pinned per tensor also hashes its tensors on
// several. When the files are not kept (verify, list, retention) each is
// streamed, a chunk in memory; only state.json is read whole, and those read
// at once hold at most kVerifyBytesInFlight between them (a larger one is
// read alone). A failure other than a file's own (a thread that cannot start)
// is rethrown.
constexpr std::uint64_t kVerifyBytesInFlight = 2ull << 30;
// anchor writes a few files per rank; a manifest listing more is not one of its saves.
constexpr std::size_t kMaxFiles = 100000;

void check_files(std::vector<FileCheck>& checks, bool keep, std::int64_t dir_step) {
  std::vector<FileCheck*> todo;
  for (auto& c : checks)
    if (c.read) todo.push_back(&c);
  std::stable_sort(todo.begin(), todo.end(), [](const FileCheck* a, const FileCheck* b) { return a->size > b->size; });
  // The CPUs this process may run on (a container's or a job's share), not the machine's.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int usable = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const std::size_t workers = std::min<std::size_t>({todo.size(), static_cast<std::size_t>(std::max(1, usable)), 8});
  // A file pinned per tensor hashes its tensors on every usable CPU: the
  // other files' workers mostly read (or are done: state.json is small), and
  // threads that outnumber the CPUs only take turns.
  for (auto* c : todo) c->hash_threads = static_cast<unsigned>(std::max(1, usable));
  if (workers <= 1) {
    for (auto* c : todo) check_file(*c, keep, dir_step);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::condition_variable freed;
  std::uint64_t in_flight = 0;
  std::exception_ptr failed;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < todo.size();) {
      // Streamed files hold a chunk each; only state.json, parsed, is read whole when nothing is kept.
      const std::uint64_t bytes = keep || !todo[i]->is_state ? 0 : todo[i]->size;
      {
        std::unique_lock<std::mutex> lk(mu);
        freed.wait(lk, [&] {
          return in_flight == 0 || (in_flight < kVerifyBytesInFlight && bytes <= kVerifyBytesInFlight - in_flight);
        });
        in_flight += bytes;
      }
      try {
        check_file(*todo[i], keep, dir_step);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed) failed = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        in_flight -= bytes;
      }
      freed.notify_all();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  } catch (...) {  // fewer threads: the ones started and this one finish the work
  }
  work();
  for (auto& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

// One step directory examined (Store::inspect): every problem found, in the
// order a reader meets them (the directory, COMMITTED, manifest.json, each
// listed file in manifest order, files nobody listed).
class Inspector {
 public:
  Inspector(const std::string& dir, bool keep_files) : dir_(dir), keep_(keep_files) { in_.v.dir = dir; }

  Found run() {
    if (!directory_is_a_step()) return std::move(in_);
    // A restore also says what it saw: every entry before the files were
    // read, kept only when the same after (VerifiedDir).
    const auto before = keep_ ? VerifiedDir::before_verification(dir_) : std::nullopt;
    const auto manifest = commit_and_manifest();
    if (manifest) check_manifest(*manifest);
    unlisted_files();
    auto& v = in_.v;
    v.ok = v.problems.empty();
    v.state = v.ok ? "committed" : (committed_ ? "invalid" : "uncommitted");
    if (!v.ok) {
      in_.files.clear();
      in_.digests.clear();
      in_.state = json();
    } else if (before) {
      if (auto after = VerifiedDir::of(dir_); after && *after == *before) in_.seen = std::move(*after);
    }
    return std::move(in_);
  }

 private:
  // The small files (COMMITTED, manifest.json) are read whole; at most this
  // much (a manifest lists ~100 bytes per file).
  static constexpr std::uint64_t kMaxSmallFile = kMaxManifestBytes;

  // A problem may quote a path or a file's bytes (a JSON parse error shows the
  // token it stopped at): keep every one valid UTF-8, for --json and reports.
  // The files of the manifest are read and hashed in parallel, each with a
  // list of its own: `sink_` is where problem() writes, so that every problem
  // still comes out in manifest order.
  void problem(const std::string& p) { sink_->push_back(printable(p)); }
  void problem_errno(const std::string& what, int err) {
    problem(what + ": " + std::strerror(err) + " (" + errno_name(err) + ")");
  }

  // The directory itself: there, a directory, a step (not a temporary or
  // trash one), listable. False when nothing more can be examined.
  bool directory_is_a_step() {
    auto& v = in_.v;
    const std::string base = stdfs::path(dir_).filename().string();
    dn_ = parse_dir_name(base);
    v.step = dn_.step;
    v.bytes = dir_bytes(dir_);
    struct stat dst {};
    if (::stat(dir_.c_str(), &dst) != 0) {
      const int err = errno;
      v.state = err == ENOENT ? "invalid" : "unreadable";
      problem_errno(dir_ + (err == ENOENT ? " does not exist" : " cannot be examined"), err);
      return false;
    }
    if (!S_ISDIR(dst.st_mode)) {
      v.state = "invalid";
      problem(dir_ + " is not a directory");
      return false;
    }
    if (dn_.kind == DirKind::kTemp) {
      v.state = "temporary";
      problem("temporary directory of an unfinished save (never loaded; removed at start-up)");
      return false;
    }
    if (dn_.kind == DirKind::kTrash) {
      v.state = "trash";
      problem("being deleted by retention (never loaded; removed at start-up)");
      return false;
    }
    if (dn_.kind == DirKind::kOther) problem("directory name '" + base + "' is not step-<N>");
    // A directory that cannot be listed (no read or search permission) is not
    // "a save that did not finish": say what the system said.
    if (DIR* d = ::opendir(dir_.c_str())) {
      ::closedir(d);
      return true;
    }
    const int err = errno;
    v.state = "unreadable";
    problem_errno("cannot list " + dir_, err);
    return false;
  }

  // Whether an entry exists: nullopt and a problem when that cannot even be
  // told (ELOOP, EACCES, ...): "missing" would be a wrong explanation.
  std::optional<bool> present(const std::string& name) {
    struct stat st {};
    if (::lstat(join(dir_, name).c_str(), &st) == 0) return true;
    const int err = errno;
    if (err == ENOENT) return false;
    problem_errno(name + " cannot be examined", err);
    return std::nullopt;
  }

  // The size of a regular file as stat sees it (nullopt: not one, or gone):
  // what anchor checks before reading a file into memory. A 1 TB sparse
  // COMMITTED, or a model file far larger than its manifest says, is a
  // problem, not an allocation that fails (or the OOM killer). stat: a
  // symlink there is checked by the size of what it names, which is what is read.
  std::optional<std::uint64_t> regular_size(const std::string& name) const {
    struct stat st {};
    if (::stat(join(dir_, name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return static_cast<std::uint64_t>(st.st_size);
  }

  std::optional<std::string> read_small(const std::string& name, FileDigest* d) {
    if (const auto size = regular_size(name); size && *size > kMaxSmallFile) {
      problem(name + ": " + std::to_string(*size) + " bytes, more than the " + std::to_string(kMaxSmallFile) +
              " a checkpoint's " + name + " may hold");
      return std::nullopt;
    }
    try {
      return read_file_hashed(join(dir_, name), d);
    } catch (const Error& e) {
      problem(name + ": cannot be read: " + e.what());
    } catch (const std::bad_alloc&) {
      problem(name + ": cannot be read: too large for memory");
    }
    return std::nullopt;
  }

  // COMMITTED must hold the SHA-256 of manifest.json. An entry named
  // COMMITTED that cannot be read still counts as one: the directory is
  // "invalid" (it says why), not "uncommitted". Returns manifest.json's text
  // when it could be read.
  std::optional<std::string> commit_and_manifest() {
    const std::optional<bool> has_commit = present(kCommitted);
    committed_ = has_commit.value_or(true);
    std::optional<std::string> commit_text;
    if (has_commit && !*has_commit)
      problem("no COMMITTED marker: the save did not finish");
    else if (has_commit)
      commit_text = read_small(kCommitted, nullptr);
    FileDigest mdig;
    std::optional<std::string> mtext;
    const std::optional<bool> has_manifest = present(kManifest);
    if (has_manifest && !*has_manifest)
      problem("manifest.json is missing");
    else if (has_manifest)
      mtext = read_small(kManifest, &mdig);
    if (commit_text) {
      const std::string& c = *commit_text;
      if (c.size() != 65 || c.back() != '\n' || !is_sha256_hex(c.substr(0, 64)))
        problem("COMMITTED does not hold a SHA-256 (64 lowercase hex digits and a newline)");
      else if (mtext && c.substr(0, 64) != mdig.sha256)
        problem("COMMITTED holds " + c.substr(0, 64) + " but manifest.json hashes to " + mdig.sha256);
    }
    return mtext;
  }

  // manifest.json's own fields, then every file it lists.
  void check_manifest(const std::string& text) {
    json m;
    try {
      m = parse_json(text);
    } catch (const json::exception& e) {
      problem(std::string("manifest.json is not valid JSON: ") + e.what());
    }
    if (!m.is_null() && !m.is_object()) problem("manifest.json is not a JSON object");
    if (!m.is_object()) return;
    const json format = m.value("format", json());
    per_tensor_ = format == json(kManifestFormat);
    if (!per_tensor_ && format != json(kManifestFormatV1))
      problem("manifest.json format is " + format.dump() + ", expected \"" + kManifestFormat + "\" (or \"" +
              kManifestFormatV1 + "\")");
    if (!m.contains("step") || !m["step"].is_number_integer())
      problem("manifest.json has no integer step");
    else if (dn_.step >= 0 && m["step"].get<std::int64_t>() != dn_.step)
      problem("manifest.json step is " + m["step"].dump() + " but the directory is step " + std::to_string(dn_.step));
    if (!m.contains("files") || !m["files"].is_array()) {
      problem("manifest.json has no files list");
      return;
    }
    have_list_ = true;
    if (m["files"].size() > kMaxFiles) {
      problem("manifest.json lists " + std::to_string(m["files"].size()) + " files, more than the " +
              std::to_string(kMaxFiles) + " a checkpoint holds");
      m["files"] = json::array();
    }
    check_listed_files(m["files"]);
    in_.manifest = std::move(m);
  }

  // Each entry checked as written, then every listed file read, hashed and
  // parsed in parallel; their problems in manifest order.
  void check_listed_files(const json& files) {
    std::vector<FileCheck> checks;  // one per entry, in manifest order
    checks.reserve(files.size());
    for (const json& f : files) {
      checks.emplace_back();
      sink_ = &checks.back().problems;
      listed_entry(f, checks.back());
    }
    sink_ = &in_.v.problems;
    check_files(checks, keep_, dn_.step);
    for (auto& c : checks) {
      for (auto& p : c.problems) in_.v.problems.push_back(printable(p));
      if (c.state) in_.state = std::move(*c.state);
      if (c.file) in_.files.emplace(c.name, std::move(*c.file));
      if (c.verified) in_.digests.emplace(c.name, std::move(*c.verified));
    }
    if (!listed_.count(kState)) problem("manifest.json does not list state.json");
  }

  // One manifest entry: well-formed, a plain name listed once, the file
  // there and no larger than listed; then `c` is set to read it.
  void listed_entry(const json& f, FileCheck& c) {
    const bool whole = f.is_object() && f.contains("sha256") && f["sha256"].is_string() &&
                       is_sha256_hex(f["sha256"].get<std::string>()) && !f.contains("tensors");
    std::optional<TensorDigests> pinned = whole ? std::nullopt : pinned_per_tensor(f);
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || (!whole && !pinned)) {
      problem("manifest.json has a malformed file entry " + f.dump());
      return;
    }
    const std::string name = f["path"].get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == kManifest || name == kCommitted) {
      problem("manifest.json lists an invalid path '" + name + "'");
      return;
    }
    if (!listed_.insert(name).second) {
      problem("manifest.json lists '" + name + "' twice");
      return;
    }
    const std::uint64_t size = f["size"].get<std::uint64_t>();
    const std::optional<bool> has_file = present(name);
    if (!has_file) return;
    if (!*has_file) {
      problem(name + " is missing (listed in manifest.json)");
      return;
    }
    // A file larger than the manifest says is not read at all (a sparse
    // terabyte would be); a smaller one is, to say how it is damaged.
    if (const auto on_disk = regular_size(name); on_disk && *on_disk > size) {
      problem(name + ": size is " + std::to_string(*on_disk) + " bytes, manifest.json says " + std::to_string(size));
      return;
    }
    c.name = name;
    c.path = join(dir_, name);
    c.size = size;
    c.is_safetensors = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (pinned && !c.is_safetensors) {
      problem("manifest.json pins " + name + " per tensor, but it is not a .safetensors file");
      return;
    }
    if (whole) c.sha256 = f["sha256"].get<std::string>();
    c.pinned = std::move(pinned);
    c.is_state = name == kState;
    c.read = true;
  }

  // A v2 entry's per-tensor pins: {"header_sha256": hex, "tensors": {name: hex}}
  // and no "sha256"; nullopt when it is not one (or the manifest is v1).
  std::optional<TensorDigests> pinned_per_tensor(const json& f) const {
    if (!per_tensor_ || !f.is_object() || f.contains("sha256") || !f.contains("header_sha256") ||
        !f["header_sha256"].is_string() || !is_sha256_hex(f["header_sha256"].get<std::string>()) ||
        !f.contains("tensors") || !f["tensors"].is_object())
      return std::nullopt;
    TensorDigests d;
    d.header = f["header_sha256"].get<std::string>();
    for (auto it = f["tensors"].begin(); it != f["tensors"].end(); ++it) {
      if (!it.value().is_string() || !is_sha256_hex(it.value().get<std::string>())) return std::nullopt;
      d.tensors.emplace(it.key(), it.value().get<std::string>());
    }
    return d;
  }

  // A file that the manifest does not cover was not written by the save.
  void unlisted_files() {
    if (!have_list_) return;
    std::error_code ec;
    for (stdfs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n != kManifest && n != kCommitted && !listed_.count(n)) problem(n + " is not listed in manifest.json");
    }
  }

  const std::string dir_;
  const bool keep_;
  Found in_;
  std::vector<std::string>* sink_ = &in_.v.problems;
  DirName dn_;
  bool committed_ = false;   // an entry named COMMITTED is there (or cannot be told)
  bool have_list_ = false;   // the manifest parsed and has a files list
  bool per_tensor_ = false;  // the manifest is v2: a safetensors file may be pinned per tensor
  std::set<std::string> listed_;
};

}  // namespace

Store::Inspection Store::inspect(const std::string& dir, bool keep_files) const {
  Inspection out;
  static_cast<Found&>(out) = Inspector(dir, keep_files).run();
  return out;
}

Store::Verification Store::verify(const std::string& step_dir, const std::vector<VerifiedDir>& seen) const {
  for (const auto& s : seen) {
    const DirName name = parse_dir_name(stdfs::path(step_dir).filename().string());
    if (name.kind != DirKind::kStep || !s.still_matches(step_dir)) continue;
    Verification v;  // verified completely by whoever saw it so, and not changed since
    v.ok = true;
    v.dir = step_dir;
    v.step = name.step;
    v.state = "committed";
    v.bytes = s.regular_bytes();
    return v;
  }
  return inspect(step_dir, false).v;
}

Store::Pinned Store::pinned(const std::string& step_dir) const {
  Inspection in = inspect(step_dir, false);
  if (!in.v.ok) return {std::move(in.v), json(), json()};
  return {std::move(in.v), std::move(in.state), std::move(in.manifest)};
}

namespace {
struct Candidate {
  std::string path;
  DirName name;
};
std::vector<Candidate> scan(const std::string& root) {
  std::vector<Candidate> out;
  std::error_code ec;
  if (!stdfs::exists(root, ec)) return out;
  stdfs::directory_iterator it(root, ec), end;
  if (ec) throw io_error("list", root, ec.value());
  for (; it != end; it.increment(ec)) {
    if (ec) throw io_error("list", root, ec.value());
    DirName d = parse_dir_name(it->path().filename().string());
    if (d.kind != DirKind::kOther) out.push_back({it->path().string(), d});
  }
  // Newest first; at equal steps the committed name before temp/trash.
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.name.step != b.name.step) return a.name.step > b.name.step;
    if (a.name.kind != b.name.kind) return a.name.kind < b.name.kind;
    return a.path < b.path;
  });
  return out;
}
}  // namespace

std::optional<Store::Loaded> Store::restore_newest(std::optional<std::int64_t> max_step,
                                                   std::vector<Skipped>* skipped_out) const {
  std::vector<Skipped> skipped;
  for (const Candidate& c : scan(root_)) {
    if (max_step && c.name.step > *max_step) continue;
    if (c.name.kind != DirKind::kStep) {
      skipped.push_back({c.path, c.name.kind == DirKind::kTemp ? "temporary directory of an unfinished save"
                                                               : "being deleted by retention"});
      continue;
    }
    Inspection in = inspect(c.path, true);
    if (!in.v.ok) {
      std::string reason;
      for (const auto& p : in.v.problems) reason += (reason.empty() ? "" : "; ") + p;
      ANCHOR_LOG_WARN("checkpoint", "skipping {}: {}", c.path, reason);
      skipped.push_back({c.path, reason});
      continue;
    }
    Loaded l;
    l.step = c.name.step;
    l.dir = c.path;
    l.state = std::move(in.state);
    l.manifest = std::move(in.manifest);
    l.files = std::move(in.files);
    l.digests = std::move(in.digests);
    l.verified = std::move(in.seen);
    l.skipped = skipped;
    if (skipped_out) *skipped_out = skipped;
    ANCHOR_LOG_INFO("checkpoint", "restoring {} ({} newer skipped)", c.path, skipped.size());
    return l;
  }
  if (skipped_out) *skipped_out = skipped;
  return std::nullopt;
}

std::optional<Store::Verification> Store::verify_listed(const std::string& step_dir,
                                                        const std::vector<VerifiedDir>& seen) const {
  Verification v = verify(step_dir, seen);
  // Gone between the listing and its verification (retention, another pilot's, removed it): not a
  // checkpoint that is invalid, one that is no longer there.
  std::error_code ec;
  if (!v.ok && stdfs::symlink_status(step_dir, ec).type() == stdfs::file_type::not_found) {
    ANCHOR_LOG_INFO("checkpoint", "{} was removed while the checkpoints were listed", printable(step_dir));
    return std::nullopt;
  }
  return v;
}

std::vector<Store::Verification> Store::list(const std::vector<VerifiedDir>& seen) const {
  std::vector<Verification> out;
  for (const Candidate& c : scan(root_))
    if (auto v = verify_listed(c.path, seen)) out.push_back(std::move(*v));
  return out;
}

std::vector<std::string> Store::remove_stale_temps() {
  std::vector<std::string> removed;
  for (const Candidate& c : scan(root_)) {
    if (c.name.kind == DirKind::kStep) continue;
    fs_->remove_all(c.path);
    removed.push_back(c.path);
    ANCHOR_LOG_INFO("checkpoint", "removed stale {}", c.path);
  }
  if (!removed.empty()) fs_->fsync_dir(root_);
  return removed;
}

std::vector<std::string> Store::apply_retention(int keep_last, const std::string& just_committed) {
  if (keep_last < 1)
    throw Error(ErrorKind::kUsage, "checkpoint retention: keep_last must be >= 1, got " + std::to_string(keep_last));
  std::vector<Candidate> steps;
  for (const Candidate& c : scan(root_))
    if (c.name.kind == DirKind::kStep) steps.push_back(c);
  // Find the keep_last newest that verify; everything older than the oldest
  // of them goes.
  int valid = 0;
  std::size_t cut = steps.size();
  auto verifies = [&](const std::string& dir) {
    std::error_code ec;
    // The same directory however its path is spelled (a trailing slash in the root).
    if (!just_committed.empty() && stdfs::equivalent(dir, just_committed, ec))
      return stdfs::is_regular_file(join(dir, kCommitted), ec);
    return inspect(dir, false).v.ok;
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (verifies(steps[i].path) && ++valid == keep_last) {
      cut = i + 1;
      break;
    }
  }
  std::vector<std::string> deleted;
  for (std::size_t i = cut; i < steps.size(); ++i) {
    const std::string trash = steps[i].path + ".trash-" + fs::random_suffix();
    fs_->rename(steps[i].path, trash);
    fs_->fsync_dir(root_);
    fs_->remove_all(trash);
    deleted.push_back(steps[i].path);
    ANCHOR_LOG_INFO("checkpoint", "retention: deleted {}", steps[i].path);
  }
  return deleted;
}

}  // namespace anchor::checkpoint
