#pragma once
// The run manifest: everything that decides a run's result, pinned by digest
// before any training ("anchor.manifest/v1", field by field in docs/manifest.md).
//
//   nlohmann::json m = manifest::pin(cfg);            // hashes data, model, libraries
//   auto drift = manifest::compare(old_m, m);          // what changed since
//   std::cerr << manifest::format_drift_table(drift);
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::manifest {

inline constexpr const char* kFormat = "anchor.manifest/v1";

struct PinOptions {
  bool use_cache = true;   // read/write the hash cache (HashCache::default_file())
  int threads = 0;         // hashing threads; 0 -> hardware_concurrency
  bool progress = true;    // progress line on a terminal when hashing takes > 1 s
  std::string cache_file;  // empty -> HashCache::default_file(); for tests and tools
  int world_size = 0;      // ranks whose dropout seeds are listed; 0 -> distributed.nproc_per_node
};

// Pins `cfg`: expands data globs, hashes every data shard, the model file (if
// any) and every loaded shared library in parallel, and gathers config,
// seeds, dependency versions, container, host and device facts.
// Writes nothing except the hash cache (a failure to write it is a warning).
// Throws Error naming the path and the config entry:
//   kConfig: a glob matching nothing, a malformed or contradictory container
//            digest, container.required without a digest, model.source needing
//            a file that is not set;
//   kIo:     a missing or unreadable file, a directory, a symlink loop, a file
//            that changed while it was hashed.
nlohmann::json pin(const config::Config& cfg, const PinOptions& opts = {});

// Rebuilds the Config stored in a manifest (config.effective + its base_dir),
// for `pin --check` and `reproduce`. Throws Error (kConfig) when `manifest` is
// not an anchor.manifest/v1 document.
config::Config config_from_manifest(const nlohmann::json& manifest);

// One difference between two manifests. `what` names the pin
// ("data.train shards/a.bin", "dependencies.libtorch", "library /usr/lib/...").
// Values are short human strings; "(absent)" when one side lacks the item.
struct Drift {
  std::string what;
  std::string old_value;
  std::string new_value;
};

// Everything that differs between two manifests and could change a result.
// Volatile fields are ignored: created_at, host.hostname, hashing statistics,
// the per-digest "cached" flags, resolved absolute paths, the executable's own
// digest, and libraries that glibc or anchor load on demand (libnss_*, gconv
// modules, libcuda, libnvidia-ml) when only one side has them.
// docs/manifest.md lists what is compared. Never throws for well-formed input;
// missing sections compare as "(absent)".
std::vector<Drift> compare(const nlohmann::json& old_manifest, const nlohmann::json& new_manifest);

// An aligned three-column text table (WHAT, OLD, NEW), one row per drift;
// "no drift\n" when the list is empty.
std::string format_drift_table(const std::vector<Drift>& drift);

}  // namespace anchor::manifest
