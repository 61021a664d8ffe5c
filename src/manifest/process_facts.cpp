#include "anchor/manifest/process_facts.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

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
constexpr const char* kCacheFormat = "anchor.process-facts-cache/v1";
// One entry per (binary, configured device); a machine has a few builds at most.
constexpr std::size_t kMaxCacheEntries = 16;

// What the loader and the device probes read besides the binary and the
// libraries themselves: a change to any of them may change the answer.
constexpr const char* kKeyEnv[] = {"LD_LIBRARY_PATH", "LD_PRELOAD", "LD_BIND_NOW", "CUDA_VISIBLE_DEVICES",
                                   "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"};
constexpr const char* kKeyFiles[] = {"/etc/ld.so.cache", "/etc/ld.so.preload", "/proc/driver/nvidia/version",
                                     "/dev/kfd"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A file's identity as the hash cache keys it, plus ctime (a rewrite that
// restores the mtime still moves the ctime). null when it does not exist.
nlohmann::json identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return nullptr;
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

// The GPUs the NVIDIA driver lists (their PCI addresses): a card swapped
// without a driver change changes the device facts.
nlohmann::json nvidia_gpus() {
  nlohmann::json out = nlohmann::json::array();
  std::error_code ec;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end; it.increment(ec))
    names.push_back(printable(it->path().filename().string()));
  std::sort(names.begin(), names.end());
  for (auto& n : names) out.push_back(std::move(n));
  return out;
}

// Everything the answer rests on, as it is now. Paths go through printable():
// the key is compared, never used to open anything.
nlohmann::json cache_key(const std::string& binary, const std::string& device, const ProcessFacts& facts) {
  nlohmann::json env = nlohmann::json::object();
  for (const char* v : kKeyEnv) {
    const char* s = std::getenv(v);
    env[v] = s ? nlohmann::json(printable(s)) : nlohmann::json(nullptr);
  }
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : kKeyFiles) files[f] = identity(f);
  nlohmann::json libs = nlohmann::json::array();
  for (const auto& l : facts.libraries) libs.push_back({printable(l.path), identity(l.path)});
  return {{"binary", printable(binary)}, {"binary_identity", identity(binary)}, {"device", printable(device)},
          {"env", env}, {"loader_files", files}, {"nvidia_gpus", nvidia_gpus()}, {"libraries", libs}};
}

std::string entry_name(const std::string& binary, const std::string& device) {
  return printable(binary) + "\n" + printable(device);
}

// The cache's entries; an empty object when there is none or it is unusable
// (said once, at warn level: it is rewritten by the next probe).
nlohmann::json read_cache(const std::string& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) return nlohmann::json::object();
  try {
    const nlohmann::json j = parse_json(fs::read_file(file));
    if (j.is_object() && j.value("format", "") == kCacheFormat && j.contains("entries") && j["entries"].is_object())
      return j["entries"];
    ANCHOR_LOG_WARN("pin", "{} is not an anchor process-facts cache; ignoring it (it is rewritten)", printable(file));
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("pin", "process-facts cache {} cannot be read ({}); ignoring it (it is rewritten)", printable(file),
                    e.what());
  }
  return nlohmann::json::object();
}

void write_cache(const std::string& file, nlohmann::json entries, const std::string& name, nlohmann::json entry) {
  entry["written_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  entries[name] = std::move(entry);
  while (entries.size() > kMaxCacheEntries) {  // drop the oldest
    auto oldest = entries.begin();
    for (auto it = entries.begin(); it != entries.end(); ++it)
      if (it->value("written_ns", std::int64_t{0}) < oldest->value("written_ns", std::int64_t{0})) oldest = it;
    entries.erase(oldest);
  }
  try {
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    fs::atomic_write_file(file, dump_json(nlohmann::json{{"format", kCacheFormat}, {"entries", entries}}) + "\n");
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("pin", "could not write the process-facts cache {}: {}", printable(file), e.what());
  }
}

ProcessFacts probe(const std::string& binary, const std::string& device) {
  const auto t0 = std::chrono::steady_clock::now();
  proc::RunResult r;
  try {
    r = proc::run_capture({binary, "__process-facts", "--device", device});
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime, "pin: cannot start " + printable(binary) + " to read the training process's "
                                     "libraries: " + e.what(),
                "anchor-torch is built and installed next to anchor; rebuild with `make build`");
  }
  const std::string what = printable(binary) + " __process-facts";
  if (r.status != 0)
    throw Error(ErrorKind::kRuntime, what + " " + proc::describe_exit(r.status),
                "run `" + what + " --device " + printable(device) + "` to see its error; anchor and anchor-torch "
                "must come from one build");
  nlohmann::json j;
  try {
    j = parse_json(r.out);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, what + " printed something that is not JSON: " + e.what(),
                "anchor and anchor-torch must come from one build");
  }
  ProcessFacts f = process_facts_from_json(j, what);
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
  nlohmann::json j = {{"format", kFactsFormat}, {"runtime", printable_json(f.runtime)},
                      {"device", printable_json(f.device)}, {"libraries", libs}};
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
    top.str("executable");
    f.executable = path_field(j, "executable");
    const auto& libs = top.array("libraries");
    for (std::size_t i = 0; i < libs.size(); ++i) {
      JsonFields l(libs[i], JsonFields::item("libraries", i));
      l.str("path");
      LoadedLibrary lib;
      lib.path = path_field(libs[i], "path");
      lib.deleted = l.boolean_or("deleted", false);
      lib.replaced_since_load = l.boolean_or("replaced_since_load", false);
      if (lib.path.empty() || lib.path[0] != '/')
        throw std::invalid_argument(JsonFields::item("libraries", i) + ".path is not an absolute path");
      f.libraries.push_back(std::move(lib));
    }
    if (f.executable.empty() || f.executable[0] != '/')
      throw std::invalid_argument("executable is not an absolute path");
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
  nlohmann::json entries = read_cache(file);
  const std::string name = entry_name(binary, device);
  if (auto it = entries.find(name); it != entries.end() && it->is_object() && it->contains("facts") &&
                                    it->contains("key")) {
    try {
      ProcessFacts cached = process_facts_from_json((*it)["facts"], "process-facts cache " + printable(file));
      if (cache_key(binary, device, cached) == (*it)["key"]) {
        cached.source = "cached";
        cached.seconds = seconds_since(t0);
        return cached;
      }
      ANCHOR_LOG_DEBUG("pin", "process-facts cache: {} or what it loads changed; asking it again", printable(binary));
    } catch (const Error& e) {
      ANCHOR_LOG_WARN("pin", "{}; asking anchor-torch again", e.what());
    }
  }
  const nlohmann::json before = cache_key(binary, device, ProcessFacts{});
  ProcessFacts f = probe(binary, device);
  nlohmann::json key = cache_key(binary, device, f);
  nlohmann::json rest = key;
  rest["libraries"] = nlohmann::json::array();
  bool stable = rest == before;  // nothing moved while anchor-torch ran
  for (const auto& l : f.libraries) stable = stable && !l.deleted && !l.replaced_since_load;
  if (stable) write_cache(file, std::move(entries), name, {{"key", std::move(key)}, {"facts", to_json(f)}});
  else ANCHOR_LOG_DEBUG("pin", "process facts not cached: a library or the loader changed while they were read");
  return f;
}

}  // namespace anchor::manifest
