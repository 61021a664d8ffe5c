#include "anchor/report/provenance.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/statement.hpp"

namespace anchor::report {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// `j[key]` when it is an object / array / string, else nullptr or "".
const json* object_at(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}
const json* array_at(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? &*it : nullptr;
}
std::string string_at(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

// Every byte outside RFC 3986's unreserved set as %XX.
std::string percent_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A host path's last component, as a descriptor's name: where a file was on the node that ran is
// not part of what it is (its digest is), and the signed report's manifest keeps the path.
std::string file_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return printable(slash == std::string::npos ? path : path.substr(slash + 1));
}

// Integers beyond +-2^53, as decimal strings: the protobuf Struct that SLSA and in-toto tools read
// parameters into holds a number as a double, which would round a derived seed.
json exact_integers(const json& j) {
  constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > kExact) return std::to_string(j.get<std::uint64_t>());
  if (j.is_number_integer() && !j.is_number_unsigned() &&
      (j.get<std::int64_t>() > static_cast<std::int64_t>(kExact) ||
       j.get<std::int64_t>() < -static_cast<std::int64_t>(kExact)))
    return std::to_string(j.get<std::int64_t>());
  if (!j.is_structured()) return j;
  json out = j;
  for (auto it = out.begin(); it != out.end(); ++it) *it = exact_integers(*it);
  return out;
}

// A resource descriptor: name (when given), uri (when given), digest.sha256
// (when the record holds one), annotations (when any).
ordered_json descriptor(const std::string& name, const std::string& uri, const std::string& sha256,
                        ordered_json annotations = ordered_json::object()) {
  ordered_json d = ordered_json::object();
  if (!name.empty()) d["name"] = name;
  if (!uri.empty()) d["uri"] = uri;
  if (is_hex64(sha256)) d["digest"] = {{"sha256", sha256}};
  if (!annotations.empty()) d["annotations"] = std::move(annotations);
  return d;
}

// A pinned file record ({path, resolved, size, sha256}) as a descriptor named by the path as the
// config wrote it (relative to the config's directory, as a rule): not where the node found it.
ordered_json file_descriptor(const json& f, ordered_json annotations) {
  if (f.contains("size") && f["size"].is_number_integer() && f["size"].get<std::int64_t>() >= 0)
    annotations["size"] = f["size"];
  return descriptor(printable(string_at(f, "path")), "", string_at(f, "sha256"), std::move(annotations));
}

void add_model_and_data(const json& manifest, ordered_json& deps) {
  if (const json* model = object_at(manifest, "model"))
    if (const json* files = array_at(*model, "files"))
      for (const auto& f : *files) deps.push_back(file_descriptor(f, {{"input", "model " + string_at(f, "role")}}));
  if (const json* data = object_at(manifest, "data"))
    for (const char* set : {"train", "val"})
      if (const json* s = object_at(*data, set))
        if (const json* files = array_at(*s, "files"))
          for (const auto& f : *files) deps.push_back(file_descriptor(f, {{"input", std::string("data ") + set}}));
}

// The libraries of the process that trained, by digest; the versions the
// process reported, as package URLs (no digest: a version is what was read).
void add_runtime(const json& manifest, ordered_json& deps) {
  const json* dependencies = object_at(manifest, "dependencies");
  if (!dependencies) return;
  for (const char* lib :
       {"libtorch", "cuda_runtime", "cuda_driver", "cudnn", "nccl", "hip_runtime", "miopen", "glibc"}) {
    const std::string version = string_at(*dependencies, lib);
    if (!version.empty() && version != "none")
      deps.push_back(descriptor("", "pkg:generic/" + std::string(lib) + "@" + percent_encode(version), ""));
  }
  if (const json* libs = array_at(*dependencies, "shared_libraries"))
    for (const auto& l : *libs) {
      const std::string path = string_at(l, "path");
      if (path.empty()) continue;
      ordered_json notes = {{"input", "shared library"}};
      if (l.value("deleted", false)) notes["deleted"] = true;
      if (l.value("replaced_since_load", false)) notes["replaced_since_load"] = true;
      deps.push_back(descriptor(file_name(path), "", string_at(l, "sha256"), std::move(notes)));
    }
}

// A program pilot's own sources, interpreter and Python distributions.
void add_program(const json& manifest, ordered_json& deps) {
  const json* program = object_at(manifest, "program");
  if (!program) return;
  if (const json* sources = array_at(*program, "sources"))
    for (const auto& s : *sources)
      deps.push_back(descriptor(string_at(s, "path"), "", string_at(s, "sha256"), {{"input", "program source"}}));
  if (const json* interpreter = object_at(*program, "interpreter"))
    deps.push_back(descriptor(file_name(string_at(*interpreter, "path")), "", string_at(*interpreter, "sha256"),
                              {{"input", "python interpreter"}}));
  if (const json* python = object_at(*program, "python"))
    if (const json* dists = array_at(*python, "distributions"))
      for (const auto& d : *dists) {
        std::string name = string_at(d, "name");
        for (char& c : name)
          c = c == '_' || c == '.' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (name.empty()) continue;
        // The digest is of the distribution's installed RECORD (or METADATA), not of a wheel.
        deps.push_back(descriptor("",
                                  "pkg:pypi/" + percent_encode(name) + "@" + percent_encode(string_at(d, "version")),
                                  string_at(d, "record_sha256"),
                                  {{"input", "python distribution"}, {"digest_of", string_at(d, "pinned_by")}}));
      }
}

void add_container(const json& manifest, ordered_json& deps) {
  const json* container = object_at(manifest, "container");
  if (!container) return;
  std::string digest = string_at(*container, "digest");
  if (digest.rfind("sha256:", 0) != 0) return;
  deps.push_back(descriptor("container image", "", digest.substr(7),
                            {{"input", "container image"}, {"source", string_at(*container, "source")}}));
}

}  // namespace

ordered_json build_provenance(const json& statement, const std::string& report_envelope_sha256) {
  const json* predicate = object_at(statement, "predicate");
  const json* report = predicate ? object_at(*predicate, "report") : nullptr;
  const json* subjects = array_at(statement, "subject");
  if (!report || !subjects)
    throw Error(ErrorKind::kRuntime, "the report statement has no subject array or no predicate.report object",
                "provenance is made from a statement build_statement wrote");
  static const json kNoManifest = json::object();
  const json* pinned = object_at(*report, "manifest");
  const json& manifest = pinned ? *pinned : kNoManifest;

  ordered_json external = ordered_json::object();
  external["command"] = report->contains("reproduces") ? "anchor reproduce" : "anchor pilot";
  if (const json* config = object_at(*report, "config")) external["config"] = exact_integers(*config);
  if (std::string d = string_at(*report, "config_digest"); !d.empty()) external["config_digest"] = d;
  ordered_json internal = ordered_json::object();
  if (std::string device = string_at(*report, "device"); !device.empty()) internal["device"] = device;
  if (const json* seeds = object_at(manifest, "seeds")) internal["seeds"] = exact_integers(*seeds);
  if (std::string m = string_at(*report, "manifest_sha256"); is_hex64(m)) internal["manifest_sha256"] = m;

  ordered_json resolved = ordered_json::array();
  add_model_and_data(manifest, resolved);
  add_program(manifest, resolved);
  add_container(manifest, resolved);
  add_runtime(manifest, resolved);

  ordered_json builder = {{"id", kBuilderId}};
  ordered_json version = ordered_json::object();
  if (const json* a = object_at(*report, "anchor"))
    for (const char* k : {"version", "git_commit"})
      if (std::string v = string_at(*a, k); !v.empty()) version[std::string("anchor_") + k] = v;
  if (!version.empty()) builder["version"] = version;
  if (const json* dependencies = object_at(manifest, "dependencies"))
    if (const json* exe = object_at(*dependencies, "executable"))
      builder["builderDependencies"] = ordered_json::array(
          {descriptor(file_name(string_at(*exe, "path")), "", string_at(*exe, "sha256"), {{"input", "executable"}})});

  ordered_json metadata = ordered_json::object();
  if (std::string id = string_at(*report, "run_id"); !id.empty()) metadata["invocationId"] = id;
  if (std::string t = string_at(*report, "created_at"); !t.empty()) metadata["startedOn"] = t;
  if (std::string t = string_at(*report, "finished_at"); !t.empty()) metadata["finishedOn"] = t;

  ordered_json st;
  st["_type"] = kStatementType;
  st["subject"] = *subjects;
  st["predicateType"] = kSlsaProvenanceType;
  ordered_json& p = st["predicate"];
  p["buildDefinition"] = {{"buildType", kPilotBuildType},
                          {"externalParameters", std::move(external)},
                          {"internalParameters", std::move(internal)},
                          {"resolvedDependencies", std::move(resolved)}};
  p["runDetails"] = {{"builder", std::move(builder)},
                     {"metadata", std::move(metadata)},
                     {"byproducts", ordered_json::array({descriptor(kEnvelopeFile, "", report_envelope_sha256,
                                                                    {{"predicateType", kPredicateType}})})}};
  return st;
}

}  // namespace anchor::report
