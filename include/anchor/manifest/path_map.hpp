#pragma once
// Where a past run's inputs are now (`anchor reproduce --root DIR --map
// OLD=NEW`, docs/report.md "Reproducing a run elsewhere"). A run records its
// config's directory and every input path as its config wrote it: relative
// ones against that directory, absolute ones as they were. On another machine
// (or after the tree moved) --root names the directory that now takes the
// config directory's place, and --map rewrites a recorded absolute prefix.
// Nothing is trusted because of where it was found: the inputs found there are
// hashed again and compared by digest with the recorded ones.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::manifest {

struct PathMap {
  std::string root;                                           // absolute; empty: the recorded config directory
  std::vector<std::pair<std::string, std::string>> prefixes;  // OLD -> NEW, absolute and normalised
  bool empty() const { return root.empty() && prefixes.empty(); }
  nlohmann::json to_json() const;  // for the reproduction's report
};

// "OLD=NEW": both absolute (NEW is made absolute against the current
// directory), normalised, without a trailing '/'. Throws Error (kUsage).
std::pair<std::string, std::string> parse_prefix_mapping(const std::string& text);

// `path` with the longest OLD prefix (whole components) replaced by its NEW;
// unchanged when none applies or the path is relative.
std::string map_path(const PathMap& m, const std::string& path);

// `m` for a program's recorded absolute paths (its root, sources, cwd):
// with --root, the recorded config directory is one more OLD prefix, moved
// to the root (a longer --map prefix still wins).
PathMap with_root_prefix(const PathMap& m, const std::string& recorded_base_dir);

// The config as it reads its inputs here: base_dir (and source_path) from
// --root, else mapped; every absolute config-relative path mapped.
void remap_config(config::Config& cfg, const PathMap& m);

// A recorded manifest as it would read had the run been pinned here: its
// config directory and source, its effective config's absolute input paths
// (and so its config digest) and its absolute data paths, mapped; a program
// pilot's program section and the executable and libraries it loaded too
// (with_root_prefix). What was hashed (sizes, digests) is untouched: the
// drift check compares those.
nlohmann::json remap_manifest(const nlohmann::json& manifest, const PathMap& m);

}  // namespace anchor::manifest
