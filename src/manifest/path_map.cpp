#include "anchor/manifest/path_map.hpp"

#include <filesystem>
#include <variant>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/hasher.hpp"
#include "anchor/manifest/manifest.hpp"

namespace anchor::manifest {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string normal(const std::string& p) {
  std::string s = stdfs::path(p).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Whether `prefix` is `path` or a directory above it (whole components).
bool under(const std::string& path, const std::string& prefix) {
  if (prefix == "/") return !path.empty() && path[0] == '/';
  return path.size() >= prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         (path.size() == prefix.size() || path[prefix.size()] == '/');
}

}  // namespace

json PathMap::to_json() const {
  json j = json::object();
  if (!root.empty()) set_path_field(j, "root", root);
  json p = json::array();
  for (const auto& [from, to] : prefixes) {
    json e = json::object();
    set_path_field(e, "from", from);
    set_path_field(e, "to", to);
    p.push_back(e);
  }
  if (!p.empty()) j["map"] = p;
  return j;
}

std::pair<std::string, std::string> parse_prefix_mapping(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error(ErrorKind::kUsage, "--map '" + printable(text) + "' is not OLD=NEW",
                "name the recorded directory and where it is now, e.g. --map /data/old=/mnt/new");
  const std::string from = text.substr(0, eq), to = text.substr(eq + 1);
  if (from[0] != '/')
    throw Error(ErrorKind::kUsage,
                "--map '" + printable(text) + "': OLD must be an absolute path as the run recorded it",
                "relative inputs follow the config's directory: use --root DIR for those");
  const std::string new_dir = normal(stdfs::absolute(to).string());
  // NEW is spliced into the config's paths and patterns: UTF-8 (config paths are JSON text), no glob characters.
  if (!is_valid_utf8(new_dir) || new_dir.find_first_of("*?[") != std::string::npos)
    throw Error(ErrorKind::kUsage,
                "--map '" + printable(text) + "': NEW is not UTF-8 or holds a glob character (* ? [)",
                "move or link the inputs to a directory whose path is plain UTF-8");
  return {normal(from), new_dir};
}

std::string map_path(const PathMap& m, const std::string& path) {
  if (path.empty() || path[0] != '/') return path;
  // Matched as normalised ("/old/../etc/x" is not under /old); pin expands the same normal form.
  const std::string p = stdfs::path(path).lexically_normal().string();
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& pm : m.prefixes)
    if (under(p, pm.first) && (!best || pm.first.size() > best->first.size())) best = &pm;
  if (!best) return path;
  const std::string rest = best->first == "/" ? p : p.substr(best->first.size());  // "" or "/..."
  if (best->second == "/") return rest.empty() ? "/" : rest;
  return best->second + rest;
}

void remap_config(config::Config& cfg, const PathMap& m) {
  if (!m.root.empty()) {
    const std::string name = cfg.source_path.empty() ? std::string() : stdfs::path(cfg.source_path).filename().string();
    cfg.base_dir = m.root;
    if (!name.empty()) cfg.source_path = (stdfs::path(m.root) / name).string();
  } else {
    cfg.base_dir = map_path(m, cfg.base_dir);
    cfg.source_path = map_path(m, cfg.source_path);
  }
  if (m.prefixes.empty()) return;
  for (std::string* v : config::config_relative_paths(cfg)) *v = map_path(m, *v);
}

PathMap with_root_prefix(const PathMap& m, const std::string& recorded_base_dir) {
  PathMap out = m;
  if (!m.root.empty() && !recorded_base_dir.empty() && recorded_base_dir[0] == '/')
    out.prefixes.emplace_back(normal(recorded_base_dir), m.root);
  return out;
}

namespace {

// A string field holding an absolute path, mapped in place; anything else left as it is.
void map_field(json& obj, const char* key, const PathMap& m) {
  if (!obj.is_object()) return;
  const auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) *it = map_path(m, it->get<std::string>());
}
void map_strings(json& arr, const PathMap& m) {
  if (!arr.is_array()) return;
  for (auto& v : arr)
    if (v.is_string()) v = map_path(m, v.get<std::string>());
}

// A program pilot's pins (docs/manifest.md, "program"), as pinned where the
// run's files are now: its command's absolute arguments, cwd, root and source
// directories, interpreter, sys.path and distributions, and the executable
// and shared libraries it had loaded. Sources are relative to root; sizes and
// digests are untouched, for the drift check to compare.
void remap_program(json& out, const PathMap& m) {
  json& prog = out["program"];
  if (!prog.is_object()) return;
  for (const char* k : {"cwd", "root"}) map_field(prog, k, m);
  for (const char* k : {"command", "source_dirs"})
    if (const auto it = prog.find(k); it != prog.end()) map_strings(*it, m);
  if (const auto src = prog.find("sources"); src != prog.end() && src->is_array())
    for (auto& f : *src) map_field(f, "path", m);
  if (const auto it = prog.find("interpreter"); it != prog.end()) map_field(*it, "path", m);
  if (const auto py = prog.find("python"); py != prog.end() && py->is_object()) {
    if (const auto sp = py->find("sys_path"); sp != py->end()) map_strings(*sp, m);
    if (const auto ds = py->find("distributions"); ds != py->end() && ds->is_array())
      for (auto& d : *ds) map_field(d, "dist_info", m);
  }
  const auto deps = out.find("dependencies");
  if (deps == out.end() || !deps->is_object()) return;
  if (const auto it = deps->find("executable"); it != deps->end()) map_field(*it, "path", m);
  if (const auto libs = deps->find("shared_libraries"); libs != deps->end() && libs->is_array())
    for (auto& l : *libs) map_field(l, "path", m);
}

}  // namespace

json remap_manifest(const json& manifest, const PathMap& m) {
  if (m.empty()) return manifest;
  json out = manifest;
  if (!out.is_object() || !out.contains("config") || !out["config"].is_object()) return out;
  const config::Config recorded = config_from_manifest(manifest);  // validates what it reads
  config::Config cfg = recorded;
  remap_config(cfg, m);
  if (out.contains("program")) {
    // --root moves the config's directory: the program's files under it move with it.
    remap_program(out, with_root_prefix(m, recorded.base_dir));
  }
  json& c = out["config"];
  set_path_field(c, "base_dir", cfg.base_dir);
  if (c.contains("source") || c.contains("source_hex")) set_path_field(c, "source", cfg.source_path);
  // Only when --map changed a path the config wrote (--root alone changes none); and the
  // digest only when the recorded one is this config's, so a recorded mismatch still shows.
  const json mapped_effective = config::to_json(cfg);
  if (mapped_effective != config::to_json(recorded)) {
    const bool digest_was_consistent = c.value("digest", json()) == json(config::digest(recorded));
    c["effective"] = mapped_effective;
    if (digest_was_consistent) c["digest"] = config::digest(cfg);
  }
  // Data shards are named by the path their config wrote: an absolute one is mapped.
  for (const char* split : {"train", "val"}) {
    if (!out.contains("data") || !out["data"].is_object()) break;
    json& d = out["data"];
    if (!d.contains(split) || !d[split].is_object() || !d[split].contains("files") || !d[split]["files"].is_array())
      continue;
    // And the set digest, which covers each shard's digest and name.
    std::vector<std::pair<std::string, std::string>> pairs;
    bool whole = true, moved = false;
    for (auto& f : d[split]["files"]) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("sha256") ||
          !f["sha256"].is_string()) {
        whole = false;
        continue;
      }
      const std::string mapped = map_path(m, f["path"].get<std::string>());
      moved |= mapped != f["path"].get<std::string>();
      f["path"] = mapped;
      pairs.emplace_back(f["sha256"].get<std::string>(), mapped);
    }
    if (whole && moved && d[split].contains("digest")) d[split]["digest"] = set_digest(pairs);
    if (d[split].contains("patterns") && d[split]["patterns"].is_array())
      for (auto& p : d[split]["patterns"])
        if (p.is_string()) p = map_path(m, p.get<std::string>());
  }
  return out;
}

}  // namespace anchor::manifest
