#pragma once
// The run manifest: everything that decides a run's result, pinned by digest
// before any training ("anchor.manifest/v1", field by field in docs/manifest.md).
//
//   nlohmann::json m = manifest::pin(cfg);            // hashes data, model, libraries
//   auto drift = manifest::compare(old_m, m);          // what changed since
//   std::cerr << manifest::format_drift_table(drift);
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"
#include "anchor/manifest/environment.hpp"
#include "anchor/manifest/process_facts.hpp"

namespace anchor::manifest {

inline constexpr const char* kFormat = "anchor.manifest/v1";

struct PinOptions {
  bool use_cache = true;   // read/write the hash cache (HashCache::default_file())
  int threads = 0;         // hashing threads; 0 -> hardware_concurrency
  bool progress = true;    // progress line on a terminal when hashing takes > 1 s
  std::string cache_file;  // empty -> HashCache::default_file(); for tests and tools
  int world_size = 0;      // ranks whose dropout seeds are listed; 0 -> distributed.nproc_per_node
  // Another process's runtime versions, devices, libraries and executable
  // instead of this one's (process_facts.hpp), asked for after the config's
  // cheap checks: the front end pins anchor-torch's; a program pilot pins what
  // worker A had loaded (read at its kill window, source "program") and `pin
  // --check` of its manifest re-hashes them. Empty: this process's.
  std::function<ProcessFacts()> process;
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

// What a program pilot pins of the user's program (docs/program.md, "What is
// pinned"), as its Python helper reported it in its program line.
struct PythonDistribution {
  std::string name, version, dist_info;  // dist_info: the .dist-info (or .egg-info) directory
};
struct ProgramPins {
  std::vector<std::string> command;
  std::string cwd, root;             // root: the main script's directory
  std::vector<std::string> sources;  // absolute: the modules imported from under root
  std::string executable;            // the interpreter (sys.executable, resolved)
  std::vector<std::string> sys_path;
  std::vector<PythonDistribution> distributions;
  std::string distributions_error;   // the helper could not list them
  std::string python, anchor_pilot;  // versions
};
// The manifest's "program" section: every source file (path relative to root)
// and the interpreter with size and SHA-256, every directory holding a source
// (scanned for added .py files by --check), and every Python distribution with
// its version and the SHA-256 of its RECORD (METADATA when it has none).
// Throws Error (kIo) naming a file that cannot be read.
nlohmann::json pin_program(const ProgramPins& pins, const PinOptions& opts = {});
// The same section again from an existing one (anchor pin --check): the files
// it names re-hashed, its source directories scanned for .py files it lacks,
// the distributions listed again from its sys_path.
nlohmann::json repin_program(const nlohmann::json& program, const PinOptions& opts = {});

// A program pilot's "seeds": {"root": run.seed (the seed the spec gives the
// program, which anchor_pilot.setup() seeds torch, random and NumPy with),
// "ranks": [{"rank", "torch"}]}: what each rank's torch generator was last
// seeded with at its first step (torch.initial_seed(), null when the helper
// did not say), not seeds anchor derives for its own trainer, which a program
// never uses. `ranks` as the program reported it (a re-pin keeps the recorded one).
nlohmann::json program_seeds(std::uint64_t root, nlohmann::json ranks);

// A program pilot's whole manifest pinned again (`anchor pin --check`,
// `anchor reproduce`): the libraries and the interpreter the program had
// loaded hashed again on disk, its sources and Python distributions listed
// again (repin_program); the versions torch reported stay as recorded.
// `path` names the manifest in errors. Throws Error (kConfig) when the
// recorded process facts are missing or mistyped.
nlohmann::json repin_program_manifest(const std::string& path, const nlohmann::json& old_manifest,
                                      const config::Config& cfg, PinOptions& opts);

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

// An aligned three-column text table (WHAT, OLD, NEW: or the two headers
// given, such as A and B for two runs), one row per drift, every cell through
// printable() (a manifest read from a report may hold any byte); "no drift\n"
// when the list is empty.
std::string format_drift_table(const std::vector<Drift>& drift, const std::string& old_header = "OLD",
                               const std::string& new_header = "NEW");

}  // namespace anchor::manifest
