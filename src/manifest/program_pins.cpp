// The "program" section of a program pilot's manifest: the user's sources,
// the interpreter and the Python distributions it runs on (docs/program.md,
// "What is pinned"; docs/manifest.md).
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/hasher.hpp"
#include "anchor/manifest/manifest.hpp"

namespace anchor::manifest {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;

// A path as the manifest writes it: relative to root when under it.
std::string rel_to(const std::string& path, const std::string& root) {
  if (!root.empty() && path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/')
    return path.substr(root.size() + 1);
  return path;
}

// The file a distribution is pinned by: RECORD (every installed file with its
// hash), else METADATA, else PKG-INFO (an .egg-info).
std::string dist_record(const std::string& dist_info) {
  for (const char* f : {"RECORD", "METADATA", "PKG-INFO"}) {
    std::error_code ec;
    std::string p = dist_info + "/" + f;
    if (stdfs::is_regular_file(p, ec)) return p;
  }
  return "";
}

// name-version from a "name-version.dist-info" directory name.
std::optional<PythonDistribution> dist_from_dir(const stdfs::path& dir) {
  std::string n = dir.filename().string();
  for (const char* sfx : {".dist-info", ".egg-info"}) {
    const std::string s(sfx);
    if (n.size() > s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0) {
      n.resize(n.size() - s.size());
      const auto dash = n.find('-');
      if (dash == std::string::npos) return std::nullopt;
      return PythonDistribution{n.substr(0, dash), n.substr(dash + 1), dir.string()};
    }
  }
  return std::nullopt;
}

// Every distribution installed in the sys.path directories (what --check lists again).
std::vector<PythonDistribution> scan_distributions(const std::vector<std::string>& sys_path) {
  std::vector<PythonDistribution> out;
  std::set<std::string> seen;
  for (const auto& d : sys_path) {
    std::error_code ec;
    if (!stdfs::is_directory(d, ec)) continue;
    for (const auto& e : stdfs::directory_iterator(d, ec)) {
      auto dist = dist_from_dir(e.path());
      if (!dist || !e.is_directory(ec)) continue;
      std::error_code ec2;
      dist->dist_info = stdfs::weakly_canonical(e.path(), ec2).string();
      if (seen.insert(dist->dist_info).second) out.push_back(*dist);
    }
  }
  return out;
}

json hash_section(const std::vector<std::string>& command, const std::string& cwd, const std::string& root,
                  std::vector<std::string> sources, const std::string& executable,
                  const std::vector<std::string>& sys_path, std::vector<PythonDistribution> dists,
                  const std::string& dists_error, const json& runtime, const PinOptions& opts) {
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  std::vector<HashInput> inputs;
  inputs.reserve(sources.size() + 1 + dists.size());  // sources, the interpreter, a record each
  for (const auto& s : sources) inputs.push_back({s, "program source"});
  const std::size_t exe_at = inputs.size();
  inputs.push_back({executable, "the program's interpreter"});
  std::vector<std::string> records;
  for (const auto& d : dists) {
    records.push_back(dist_record(d.dist_info));
    if (!records.back().empty()) inputs.push_back({records.back(), "Python distribution " + d.name});
  }
  HashOptions ho;
  ho.threads = opts.threads;
  ho.progress = false;
  const auto results = hash_files(inputs, ho);
  json src = json::array();
  std::set<std::string> dirs;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    src.push_back(
        {{"path", printable(rel_to(sources[i], root))}, {"size", results[i].size}, {"sha256", results[i].sha256}});
    dirs.insert(printable(rel_to(stdfs::path(sources[i]).parent_path().string(), root)));
  }
  // The root itself is "" relative to itself.
  json dir_list = json::array();
  for (const auto& d : dirs) dir_list.push_back(d == root ? "." : d);
  json dl = json::array();
  std::size_t k = exe_at + 1;
  for (std::size_t i = 0; i < dists.size(); ++i) {
    json e = {{"name", dists[i].name}, {"version", dists[i].version}, {"dist_info", printable(dists[i].dist_info)}};
    if (records[i].empty()) {
      e["record_sha256"] = nullptr;
    } else {
      e["pinned_by"] = stdfs::path(records[i]).filename().string();
      e["record_sha256"] = results[k++].sha256;
    }
    dl.push_back(std::move(e));
  }
  std::sort(dl.begin(), dl.end(), [](const json& a, const json& b) {
    return std::make_pair(a["name"].get<std::string>(), a["dist_info"].get<std::string>()) <
           std::make_pair(b["name"].get<std::string>(), b["dist_info"].get<std::string>());
  });
  json py = {{"sys_path", json::array()}, {"distributions", dl}};
  for (const auto& p : sys_path) py["sys_path"].push_back(printable(p));
  if (!dists_error.empty()) py["distributions_error"] = dists_error;
  json cmd = json::array();
  for (const auto& c : command) cmd.push_back(printable(c));
  return {{"command", cmd},
          {"cwd", printable(cwd)},
          {"root", printable(root)},
          {"sources", src},
          {"source_dirs", dir_list},
          {"interpreter",
           {{"path", printable(executable)}, {"size", results[exe_at].size}, {"sha256", results[exe_at].sha256}}},
          {"python", py},
          {"runtime", runtime}};
}

std::vector<std::string> strings_of(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array())
    for (const auto& s : j[key])
      if (s.is_string()) out.push_back(s.get<std::string>());
  return out;
}

std::string string_of(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// Every .py file in the directories that hold a source: what --check scans
// again, so a module that was there but not imported is not "added" later.
std::vector<std::string> with_siblings(const std::vector<std::string>& sources) {
  std::vector<std::string> out = sources;
  std::set<std::string> dirs;
  for (const auto& s : sources) dirs.insert(stdfs::path(s).parent_path().string());
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(d, ec))
      if (e.path().extension() == ".py" && e.is_regular_file(ec)) out.push_back(e.path().string());
  }
  return out;
}

}  // namespace

nlohmann::json pin_program(const ProgramPins& p, const PinOptions& opts) {
  // The distributions are listed from sys.path here, as --check lists them
  // again (the same names and keys on both sides); the program's own listing
  // (importlib.metadata) is kept as a count to compare with.
  json section = hash_section(p.command, p.cwd, p.root, with_siblings(p.sources), p.executable, p.sys_path,
                              scan_distributions(p.sys_path), p.distributions_error,
                              {{"python", p.python}, {"anchor_pilot", p.anchor_pilot}}, opts);
  section["python"]["distributions_reported_by_program"] = p.distributions.size();
  return section;
}

nlohmann::json repin_program(const nlohmann::json& old, const PinOptions& opts) {
  if (!old.is_object()) throw Error(ErrorKind::kConfig, "the manifest's program section is not an object");
  const std::string root = string_of(old, "root");
  // The recorded sources, and every .py file now in their directories (an added module is drift).
  std::vector<std::string> sources;
  if (old.contains("sources") && old["sources"].is_array())
    for (const auto& s : old["sources"]) {
      const std::string path = string_of(s, "path");
      if (path.empty()) continue;
      sources.push_back(!path.empty() && path[0] == '/' ? path : root + "/" + path);
    }
  for (const auto& d : strings_of(old, "source_dirs")) {
    const std::string dir = d == "." ? root : (d[0] == '/' ? d : root + "/" + d);
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(dir, ec))
      if (e.path().extension() == ".py" && e.is_regular_file(ec)) sources.push_back(e.path().string());
  }
  std::error_code ec;
  sources.erase(
      std::remove_if(sources.begin(), sources.end(), [&](const std::string& s) { return !stdfs::exists(s, ec); }),
      sources.end());
  const json py = old.value("python", json::object());
  const auto sys_path = strings_of(py, "sys_path");
  const json interp = old.value("interpreter", json::object());
  return hash_section(strings_of(old, "command"), string_of(old, "cwd"), root, sources, string_of(interp, "path"),
                      sys_path, scan_distributions(sys_path), "", old.value("runtime", json::object()), opts);
}

// A program pilot's manifest: the libraries and the interpreter the
// program had loaded are hashed again on disk, its sources and Python
// distributions listed again; the versions torch reported stay as recorded.
nlohmann::json repin_program_manifest(const std::string& path, const nlohmann::json& old_m, const config::Config& c,
                                      PinOptions& popts) {
  const nlohmann::json deps = old_m.value("dependencies", nlohmann::json::object());
  const nlohmann::json exe = deps.is_object() ? deps.value("executable", nlohmann::json::object()) : nlohmann::json();
  const nlohmann::json listed =
      deps.is_object() ? deps.value("shared_libraries", nlohmann::json::array()) : nlohmann::json();
  if (!exe.is_object() || !exe.contains("path") || !exe["path"].is_string() || !listed.is_array())
    throw Error(ErrorKind::kConfig,
                path +
                    ": dependencies.executable.path or "
                    "dependencies.shared_libraries is missing or mistyped",
                "pass the manifest.json a program pilot wrote into its run directory");
  ProcessFacts facts;
  facts.runtime = runtime_versions();
  facts.device = device_info(c.device);
  for (const auto& l : listed)
    if (l.is_object() && l.contains("path") && l["path"].is_string() &&
        !(l.contains("deleted") && l["deleted"].is_boolean() && l["deleted"].get<bool>()))
      facts.libraries.push_back({l["path"].get<std::string>(), false, false});
  facts.executable = exe["path"].get<std::string>();
  facts.source = "program";
  popts.process = [facts] { return facts; };  // a copy: popts outlives this function
  nlohmann::json new_m = pin(c, popts);
  for (const char* k : {"libtorch", "cuda_runtime", "cudnn", "nccl"})
    if (deps.contains(k)) new_m["dependencies"][k] = deps[k];
  new_m["program"] = repin_program(old_m["program"], popts);
  // What the ranks seeded is what the run did, not an input to pin again: kept as recorded.
  const nlohmann::json seeds = old_m.value("seeds", nlohmann::json::object());
  const nlohmann::json ranks = seeds.is_object() ? seeds.value("ranks", nlohmann::json()) : nlohmann::json();
  if (ranks.is_array()) new_m["seeds"] = program_seeds(c.run.seed, ranks);
  return new_m;
}

nlohmann::json program_seeds(std::uint64_t root, nlohmann::json ranks) {
  return {{"root", root}, {"ranks", std::move(ranks)}};
}

}  // namespace anchor::manifest
