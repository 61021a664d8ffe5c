#pragma once
// What only a process that trains can tell the manifest: the GPU runtime
// versions it sees, its devices, the shared libraries it has mapped and its
// executable (docs/manifest.md, "Which process is pinned").
//
// `anchor pin` runs in the front end, which has no LibTorch: it asks
// anchor-torch for these facts (`anchor-torch __process-facts`, 0.3-0.5 s of
// LibTorch start-up) and keeps the answer in the cache directory, keyed by
// what the answer rests on: the identity (stat) of anchor-torch, of every
// library the answer lists and of every directory the loader searched, the
// loader's configuration files, the NVIDIA driver's version and the
// environment that steers the loader. A later pin whose key is unchanged
// reuses the answer without starting anchor-torch; any change starts it
// again. The devices are never cached: they are read in the front end at
// every pin (the CUDA driver API needs no LibTorch).
//
//   manifest::PinOptions o;
//   o.process = [&] { return manifest::training_process_facts(cli::torch_binary(), cfg.device, true); };
//   auto m = manifest::pin(cfg, o);
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/manifest/environment.hpp"

namespace anchor::manifest {

struct ProcessFacts {
  nlohmann::json runtime;                // runtime_versions()
  nlohmann::json device;                 // device_info(configured device)
  std::vector<LoadedLibrary> libraries;  // loaded_shared_libraries()
  std::string executable;                // its /proc/self/exe
  std::vector<std::string> search_dirs;  // loader_search_dirs(): part of the cache key
  nlohmann::json build;                  // {version, git_commit, git_dirty, build_type} of its binary
  // Where they came from: "this process", "probed" (anchor-torch was run) or
  // "cached" (an earlier probe whose key still holds). Not serialised.
  std::string source = "this process";
  double seconds = 0;  // what getting them took
};

// This process's facts, read in the order pin has always read them: the
// runtime probes first (asking cuDNN its version loads its sub-libraries, the
// device probe opens the CUDA driver), then the mapped libraries, so that the
// list is the same however often a process pins.
ProcessFacts this_process_facts(const std::string& configured_device);

nlohmann::json to_json(const ProcessFacts& f);
// Throws Error (kRuntime) naming `what` and the field when `j` is not what
// to_json writes.
ProcessFacts process_facts_from_json(const nlohmann::json& j, const std::string& what);

// The line prefix that marks the answer on anchor-torch's stdout (a library
// may print lines of its own there).
inline constexpr const char* kProcessFactsLine = "@anchor-process-facts ";

// The facts of `torch_binary` (anchor-torch) for `configured_device`: from the
// cache file (default: beside the hash cache, process-facts.json) when its key
// still holds, else by running `torch_binary __process-facts --device D`, and
// then cached; `device` is always read here and now. `use_cache` false:
// always run it, never read or write the cache. A cache that cannot be read
// or written, or holds nonsense, is a warning, never fatal. Throws Error
// (kRuntime) when anchor-torch cannot be run, answers nonsense, or comes from
// another build than this binary.
ProcessFacts training_process_facts(const std::string& torch_binary, const std::string& configured_device,
                                    bool use_cache, const std::string& cache_file = "");

// The cache file's default path: process-facts.json in HashCache's directory.
std::string default_process_facts_cache();

}  // namespace anchor::manifest
