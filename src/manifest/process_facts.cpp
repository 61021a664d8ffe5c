#include "anchor/manifest/process_facts.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/hasher.hpp"

namespace anchor::manifest {
namespace {

constexpr const char* kFactsFormat = "anchor.process-facts/v1";
constexpr const char* kFactsCacheFormat = "anchor.process-facts-cache/v1";
// One entry per (binary, configured device); a machine has a few builds at most.
constexpr std::size_t kMaxCacheEntries = 16;
// Far more than 16 entries of a few hundred libraries each: anything larger is not ours.
constexpr std::uintmax_t kMaxCacheBytes = 16u << 20;

// Files the loader reads besides the binary, the libraries and the searched
// directories: their identity (or absence) is part of the key.
constexpr const char* kLoaderFiles[] = {"/etc/ld.so.cache", "/etc/ld.so.preload", "/dev/kfd"};
// Read for their content: procfs times say nothing about a driver update.
constexpr const char* kContentFiles[] = {"/proc/driver/nvidia/version"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A file's or directory's identity as the hash cache keys it, plus ctime (a
// rewrite that restores the mtime still moves the ctime; a directory's moves
// when an entry is added, removed or renamed). null when it does not exist.
nlohmann::json identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return nullptr;
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

// The latest mtime or ctime among the identities in a key (identity() arrays:
// [dev, ino, size, mtime, ctime]).
std::int64_t newest_change_ns(const nlohmann::json& j) {
  std::int64_t newest = 0;
  if (j.is_array() && j.size() == 5 && j[3].is_number_integer() && j[4].is_number_integer())
    return std::max(j[3].get<std::int64_t>(), j[4].get<std::int64_t>());
  if (j.is_array() || j.is_object())
    for (const auto& v : j) newest = std::max(newest, newest_change_ns(v));
  return newest;
}

// A key whose files changed within kRacyWindowNs (hasher.hpp) is not cached: a
// second change in the same coarse clock tick would leave every identity as it is.
bool settled(const nlohmann::json& key) {
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return newest_change_ns(key) < now - kRacyWindowNs;
}

// Up to 4 KiB of a small file's content; null when it cannot be read.
nlohmann::json content(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return printable(text);
}

// The environment of the loader and of the runtimes it loads: every LD_*
// variable but the debug output ones, glibc's tunables, and which devices the
// GPU runtimes may see (they decide what the runtime probes answer).
nlohmann::json loader_env() {
  nlohmann::json env = nlohmann::json::object();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    const bool ld = name.rfind("LD_", 0) == 0 && name.rfind("LD_DEBUG", 0) != 0;
    if (ld || name == "GLIBC_TUNABLES" || name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER" ||
        name == "HIP_VISIBLE_DEVICES" || name == "ROCR_VISIBLE_DEVICES")
      env[printable(name)] = printable(kv.substr(eq + 1));
  }
  return env;
}

// The working directory, when a loader path list holds an empty or relative
// element (the loader resolves those against it); null otherwise.
nlohmann::json cwd_if_relative() {
  for (const char* v : {"LD_LIBRARY_PATH", "LD_PRELOAD"}) {
    const char* s = std::getenv(v);
    if (!s) continue;
    std::string list = s;
    std::size_t at = 0;
    for (;;) {
      const std::size_t end = list.find_first_of(std::string(v) == "LD_PRELOAD" ? ": " : ":;", at);
      const std::string item = list.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (item.empty() || item[0] != '/') {
        std::error_code ec;
        const std::string cwd = std::filesystem::current_path(ec).string();
        return {printable(cwd), identity(cwd)};
      }
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return nullptr;
}

// The shared objects in a directory, by name, with their identities.
nlohmann::json shared_objects_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.find(".so") != std::string::npos) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& n : names) out.push_back({printable(n), identity(dir + "/" + n)});
  return out;
}

// A searched directory and, when it has them, its glibc-hwcaps subdirectories
// (glibc 2.33 on searches those first). A relative one (a RUNPATH of ".")
// is the working directory: keyed by where it is and the shared objects in
// it, not by its own mtime, which every manifest written there moves.
void add_dir(nlohmann::json& out, const std::string& dir) {
  if (dir.empty() || dir[0] != '/') {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(dir, ec).lexically_normal().string();
    out.push_back({printable(dir), printable(abs), shared_objects_in(abs)});
    return;
  }
  out.push_back({printable(dir), identity(dir)});
  const std::string hw = dir + "/glibc-hwcaps";
  if (identity(hw).is_null()) return;
  out.push_back({printable(hw), identity(hw)});
  std::error_code ec;
  std::vector<std::string> subs;
  for (std::filesystem::directory_iterator it(hw, ec), end; !ec && it != end; it.increment(ec))
    subs.push_back(it->path().string());
  std::sort(subs.begin(), subs.end());
  for (const auto& d : subs) out.push_back({printable(d), identity(d)});
}

// Everything the answer rests on, as it is now. Paths go through printable():
// the key is compared, never used to open anything.
nlohmann::json cache_key(const std::string& binary, const std::string& device, const ProcessFacts& facts) {
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : kLoaderFiles) files[f] = identity(f);
  for (const char* f : kContentFiles) files[f] = content(f);
  nlohmann::json libs = nlohmann::json::array();
  for (const auto& l : facts.libraries) libs.push_back({printable(l.path), identity(l.path)});
  nlohmann::json dirs = nlohmann::json::array();
  for (const auto& d : facts.search_dirs) add_dir(dirs, d);
  return {{"binary", printable(binary)}, {"binary_identity", identity(binary)},
          {"device", printable(device)}, {"env", loader_env()},
          {"cwd", cwd_if_relative()},    {"loader_files", files},
          {"libraries", libs},           {"search_dirs", dirs}};
}

std::string entry_name(const std::string& binary, const std::string& device) {
  return printable(binary) + "\n" + printable(device);
}

bool usable_entry(const nlohmann::json& e) {
  return e.is_object() && e.contains("key") && e.contains("facts") && e.contains("written_ns") &&
         e["written_ns"].is_number_integer();
}

// The cache's entries, each an object with a key, facts and an integer
// written_ns (others are dropped); an empty object when there is no cache or
// it is unusable (a warning when `warn`: it is rewritten by the next probe).
nlohmann::json read_cache(const std::string& file, bool warn = true) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) return nlohmann::json::object();
  try {
    // The file a symlink there names counts: stat, not lstat (fs::read_file refuses what is not a regular file).
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uintmax_t>(st.st_size) > kMaxCacheBytes)
      throw std::runtime_error(std::to_string(st.st_size) + " bytes, more than a process-facts cache holds");
    const nlohmann::json j = parse_json(fs::read_file(file));
    if (!j.is_object() || j.value("format", "") != kFactsCacheFormat || !j.contains("entries") ||
        !j["entries"].is_object())
      throw std::runtime_error("not an anchor process-facts cache");
    nlohmann::json entries = nlohmann::json::object();
    for (const auto& [name, e] : j["entries"].items())
      if (usable_entry(e)) entries[name] = e;
    return entries;
  } catch (const std::exception& e) {
    if (warn)
      ANCHOR_LOG_WARN("pin", "process-facts cache {} cannot be read ({}); ignoring it (it is rewritten)",
                      printable(file), e.what());
  }
  return nlohmann::json::object();
}

// Stores `entry` under `name`, merged into the file as it is now (another pin
// may have written since we read it), keeping the newest kMaxCacheEntries.
void write_cache(const std::string& file, const std::string& name, nlohmann::json entry) {
  entry["written_ns"] =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json entries = read_cache(file, /*warn=*/false);  // the lookup said so already
  entries[name] = std::move(entry);
  if (entries.size() > kMaxCacheEntries) {  // keep the newest
    std::vector<std::pair<std::int64_t, std::string>> by_age;
    for (auto it = entries.begin(); it != entries.end(); ++it)
      by_age.emplace_back((*it)["written_ns"].get<std::int64_t>(), it.key());
    std::sort(by_age.begin(), by_age.end(), std::greater<>());
    nlohmann::json kept = nlohmann::json::object();
    for (std::size_t i = 0; i < kMaxCacheEntries; ++i) kept[by_age[i].second] = std::move(entries[by_age[i].second]);
    entries = std::move(kept);
  }
  try {
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    fs::atomic_write_file(file, dump_json(nlohmann::json{{"format", kFactsCacheFormat}, {"entries", entries}}) + "\n");
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("pin", "could not write the process-facts cache {}: {}", printable(file), e.what());
  }
}

nlohmann::json this_build() {
  return {{"version", build::kVersion},
          {"git_commit", build::kGitCommit},
          {"git_dirty", build::kGitDirty},
          {"build_type", build::kBuildType}};
}

// anchor-torch must be the build this binary came with: the manifest's
// dependencies.anchor is this binary's, its libraries are anchor-torch's.
void check_same_build(const ProcessFacts& f, const std::string& binary) {
  if (f.build == this_build()) return;
  throw Error(ErrorKind::kRuntime,
              "pin: " + printable(binary) + " is another build (" + dump_json(f.build) + ") than this anchor (" +
                  dump_json(this_build()) + ")",
              "install anchor and anchor-torch from one build (`make build` puts both in build/release/bin)");
}

ProcessFacts probe(const std::string& binary, const std::string& device) {
  const auto t0 = std::chrono::steady_clock::now();
  if (::access(binary.c_str(), X_OK) != 0) {
    const int e = errno;
    throw Error(ErrorKind::kRuntime,
                "pin: cannot start " + printable(binary) +
                    " to read the libraries a process "
                    "that trains loads: " +
                    std::strerror(e),
                "anchor-torch is built and installed next to anchor; rebuild with `make build`");
  }
  proc::RunResult r;
  try {
    r = proc::run_capture({binary, "__process-facts", "--device", device});
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime, "pin: cannot start " + printable(binary) + ": " + e.what(),
                "anchor-torch is built and installed next to anchor; rebuild with `make build`");
  }
  const std::string what = printable(binary) + " __process-facts";
  if (r.status != 0)
    throw Error(ErrorKind::kRuntime, what + " " + proc::describe_exit(r.status),
                "run `" + what + " --device " + printable(device) +
                    "` to see its error; anchor and anchor-torch "
                    "must come from one build");
  // The last line with the prefix: a library may print lines of its own.
  std::string answer;
  std::size_t at = 0;
  while (at < r.out.size()) {
    std::size_t end = r.out.find('\n', at);
    if (end == std::string::npos) end = r.out.size();
    if (r.out.compare(at, std::strlen(kProcessFactsLine), kProcessFactsLine) == 0)
      answer = r.out.substr(at + std::strlen(kProcessFactsLine), end - at - std::strlen(kProcessFactsLine));
    at = end + 1;
  }
  if (answer.empty())
    throw Error(ErrorKind::kRuntime,
                what + " printed no answer (no line starting with \"" + std::string(kProcessFactsLine) + "\")",
                "anchor and anchor-torch must come from one build");
  nlohmann::json j;
  try {
    j = parse_json(answer);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, what + " answered something that is not JSON: " + e.what(),
                "anchor and anchor-torch must come from one build");
  }
  ProcessFacts f = process_facts_from_json(j, what);
  check_same_build(f, binary);
  f.source = "probed";
  f.seconds = seconds_since(t0);
  return f;
}

}  // namespace

ProcessFacts this_process_facts(const std::string& configured_device) {
  const auto t0 = std::chrono::steady_clock::now();
  ProcessFacts f;
  f.runtime = runtime_versions();
  f.device = device_info(configured_device);
  f.libraries = loaded_shared_libraries();
  f.executable = proc::self_exe();
  f.search_dirs = loader_search_dirs();
  f.build = this_build();
  f.seconds = seconds_since(t0);
  return f;
}

nlohmann::json to_json(const ProcessFacts& f) {
  nlohmann::json libs = nlohmann::json::array();
  for (const auto& l : f.libraries) {
    nlohmann::json e = nlohmann::json::object();
    set_path_field(e, "path", l.path);
    if (l.deleted) e["deleted"] = true;
    if (l.replaced_since_load) e["replaced_since_load"] = true;
    libs.push_back(std::move(e));
  }
  nlohmann::json dirs = nlohmann::json::array();
  for (const auto& d : f.search_dirs) {
    nlohmann::json e = nlohmann::json::object();
    set_path_field(e, "path", d);
    dirs.push_back(std::move(e));
  }
  nlohmann::json j = {{"format", kFactsFormat},
                      {"runtime", printable_json(f.runtime)},
                      {"device", printable_json(f.device)},
                      {"libraries", libs},
                      {"search_dirs", dirs},
                      {"build", printable_json(f.build)}};
  set_path_field(j, "executable", f.executable);
  return j;
}

ProcessFacts process_facts_from_json(const nlohmann::json& j, const std::string& what) {
  try {
    JsonFields top(j, "");
    if (top.str("format") != kFactsFormat)
      throw std::invalid_argument("format is " + dump_json(j["format"]) + ", expected \"" + kFactsFormat + "\"");
    ProcessFacts f;
    f.runtime = top.object("runtime");
    f.device = top.object("device");
    for (const auto& [k, v] : f.runtime.items())
      if (!v.is_string()) throw std::invalid_argument("runtime." + k + " is " + dump_json(v) + ", expected a string");
    f.build = top.object("build");
    JsonFields b(f.build, "build");
    b.str("version");
    b.str("git_commit");
    b.boolean("git_dirty");
    b.str("build_type");
    top.str("executable");
    f.executable = path_field(j, "executable");
    if (f.executable.empty() || f.executable[0] != '/')
      throw std::invalid_argument("executable is not an absolute path");
    const auto& libs = top.array("libraries");
    for (std::size_t i = 0; i < libs.size(); ++i) {
      const std::string at = JsonFields::item("libraries", i);
      JsonFields l(libs[i], at);
      l.str("path");
      LoadedLibrary lib;
      lib.path = path_field(libs[i], "path");
      lib.deleted = l.boolean_or("deleted", false);
      lib.replaced_since_load = l.boolean_or("replaced_since_load", false);
      if (lib.path.empty() || lib.path[0] != '/') throw std::invalid_argument(at + ".path is not an absolute path");
      f.libraries.push_back(std::move(lib));
    }
    const auto& dirs = top.array("search_dirs");
    for (std::size_t i = 0; i < dirs.size(); ++i) {
      JsonFields d(dirs[i], JsonFields::item("search_dirs", i));
      d.str("path");
      f.search_dirs.push_back(path_field(dirs[i], "path"));
    }
    return f;
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::kRuntime, what + ": " + e.what(), "anchor and anchor-torch must come from one build");
  } catch (const Error& e) {  // path_field: a _hex that is not hex
    throw Error(ErrorKind::kRuntime, what + ": " + e.what(), "anchor and anchor-torch must come from one build");
  }
}

std::string default_process_facts_cache() {
  return (std::filesystem::path(HashCache::default_file()).parent_path() / "process-facts.json").string();
}

ProcessFacts training_process_facts(const std::string& binary, const std::string& device, bool use_cache,
                                    const std::string& cache_file) {
  ProcessFacts f = [&] {
    if (!use_cache) return probe(binary, device);
    const auto t0 = std::chrono::steady_clock::now();
    std::string file = cache_file;
    if (file.empty()) {
      try {
        file = default_process_facts_cache();
      } catch (const Error& e) {
        ANCHOR_LOG_WARN("pin", "process-facts cache disabled: {}", e.what());
        return probe(binary, device);
      }
    }
    const std::string name = entry_name(binary, device);
    const nlohmann::json entries = read_cache(file);
    std::optional<ProcessFacts> hit;
    if (auto it = entries.find(name); it != entries.end()) {
      try {
        ProcessFacts cached = process_facts_from_json((*it)["facts"], "process-facts cache " + printable(file));
        if (cache_key(binary, device, cached) == (*it)["key"])
          hit = std::move(cached);
        else
          ANCHOR_LOG_DEBUG("pin", "process-facts cache: {} or what it loads changed; asking it again",
                           printable(binary));
      } catch (const Error& e) {
        ANCHOR_LOG_WARN("pin", "{}; asking anchor-torch again", e.what());
      }
    }
    if (hit) {
      check_same_build(*hit, binary);
      hit->source = "cached";
      hit->seconds = seconds_since(t0);
      return *hit;
    }
    // Cached only when nothing it rests on moved while anchor-torch ran and
    // every library it lists is the file it mapped.
    const nlohmann::json rest_before = cache_key(binary, device, ProcessFacts{});
    ProcessFacts probed = probe(binary, device);
    nlohmann::json key = cache_key(binary, device, probed);
    nlohmann::json rest_after = key;
    rest_after["libraries"] = nlohmann::json::array();
    rest_after["search_dirs"] = nlohmann::json::array();
    bool stable = rest_after == rest_before && settled(key);
    for (const auto& l : probed.libraries) stable = stable && !l.deleted && !l.replaced_since_load;
    if (stable)
      write_cache(file, name, {{"key", std::move(key)}, {"facts", to_json(probed)}});
    else
      ANCHOR_LOG_DEBUG("pin",
                       "process facts not cached: a library or the loader changed while they were read, or "
                       "less than 100 ms ago");
    return probed;
  }();
  // The devices as they are now: the driver API needs no LibTorch, and a
  // device reconfigured (MIG, cgroups, a card swapped) changes nothing above.
  f.device = device_info(device);
  return f;
}

}  // namespace anchor::manifest
