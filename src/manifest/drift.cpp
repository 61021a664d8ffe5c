// manifest::compare: what changed between two manifests, signal only.
#include <algorithm>
#include <map>
#include <set>

#include "anchor/manifest/manifest.hpp"

#include "anchor/common/utf8.hpp"

namespace anchor::manifest {
namespace {

using json = nlohmann::json;

const json* at(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string show(const json* v) {
  if (!v) return "(absent)";
  if (v->is_null()) return "(none)";
  if (v->is_string()) return v->get<std::string>().empty() ? "\"\"" : v->get<std::string>();
  std::string s = v->dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

void cmp(std::vector<Drift>& out, const std::string& what, const json* a, const json* b) {
  if (!a && !b) return;
  if (a && b && *a == *b) return;
  out.push_back({what, show(a), show(b)});
}

void cmp_path(std::vector<Drift>& out, const std::string& what, const json& oldm, const json& newm,
              std::initializer_list<const char*> path) {
  cmp(out, what, at(oldm, path), at(newm, path));
}

// "1a2b3c4d5e6f7a8b... 1024 B": enough of the digest to tell files apart.
std::string short_file(const json& e) {
  std::string s;
  const json* sha = at(e, {"sha256"});
  s += sha && sha->is_string() ? sha->get<std::string>().substr(0, 16) + "..." : "(no digest)";
  const json* size = at(e, {"size"});
  if (size && size->is_number()) s += " " + size->dump() + " B";
  return s;
}

bool same_content(const json& a, const json& b) {
  const json* sa = at(a, {"sha256"});
  const json* sb = at(b, {"sha256"});
  const json* za = at(a, {"size"});
  const json* zb = at(b, {"size"});
  return sa && sb && *sa == *sb && ((!za && !zb) || (za && zb && *za == *zb));
}

std::map<std::string, const json*> index_by(const json* arr, const char* key) {
  std::map<std::string, const json*> out;
  if (!arr || !arr->is_array()) return out;
  for (const auto& e : *arr) {
    const json* k = at(e, {key});
    if (k && k->is_string()) out.emplace(k->get<std::string>(), &e);
  }
  return out;
}

// Per-file comparison of two file lists keyed by `key`; returns rows added.
std::size_t cmp_files(std::vector<Drift>& out, const std::string& prefix, const json* a, const json* b,
                      const char* key) {
  auto ia = index_by(a, key);
  auto ib = index_by(b, key);
  std::set<std::string> names;
  for (const auto& [k, _] : ia) names.insert(k);
  for (const auto& [k, _] : ib) names.insert(k);
  std::size_t before = out.size();
  for (const auto& name : names) {
    auto fa = ia.find(name);
    auto fb = ib.find(name);
    std::string what = prefix + " " + name;
    if (fb == ib.end())
      out.push_back({what, short_file(*fa->second), "(removed)"});
    else if (fa == ia.end())
      out.push_back({what, "(added)", short_file(*fb->second)});
    else if (!same_content(*fa->second, *fb->second))
      out.push_back({what, short_file(*fa->second), short_file(*fb->second)});
  }
  return out.size() - before;
}

// Flattens an object into dotted keys, for naming the config keys that differ.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Libraries that glibc (NSS, iconv) or anchor's own probes (the CUDA driver,
// NVML) load on demand: whether a process happened to load them says nothing
// about the run's inputs. A changed digest of one loaded on both sides still counts.
bool on_demand_library(const std::string& path) {
  std::string base = basename_of(path);
  for (const char* prefix : {"libnss_", "libnsl", "libresolv", "libcuda.so", "libnvidia-", "libnvidia-ml.so"})
    if (base.rfind(prefix, 0) == 0) return true;
  return path.find("/gconv/") != std::string::npos;
}

// Data: each shard by its path as written, per split; the set digest only
// when no shard explains the difference.
void compare_data(std::vector<Drift>& out, const json& o, const json& n) {
  for (const char* split : {"train", "val"}) {
    std::string prefix = std::string("data.") + split;
    std::size_t rows = cmp_files(out, prefix, at(o, {"data", split, "files"}), at(n, {"data", split, "files"}), "path");
    if (rows == 0) cmp(out, prefix + " set digest", at(o, {"data", split, "digest"}), at(n, {"data", split, "digest"}));
  }
}

// Config: the digest, then the keys that differ.
void compare_config(std::vector<Drift>& out, const json& o, const json& n) {
  const json* da = at(o, {"config", "digest"});
  const json* db = at(n, {"config", "digest"});
  if (da && db && *da == *db) return;
  cmp(out, "config digest", da, db);
  const json* ea = at(o, {"config", "effective"});
  const json* eb = at(n, {"config", "effective"});
  if (!ea || !eb) return;
  std::map<std::string, json> fa, fb;
  flatten(*ea, "", fa);
  flatten(*eb, "", fb);
  std::set<std::string> keys;
  for (const auto& [k, _] : fa) keys.insert(k);
  for (const auto& [k, _] : fb) keys.insert(k);
  for (const auto& k : keys) {
    auto ia = fa.find(k);
    auto ib = fb.find(k);
    cmp(out, "config " + k, ia == fa.end() ? nullptr : &ia->second, ib == fb.end() ? nullptr : &ib->second);
  }
}

// Seeds: every purpose either side has.
void compare_seeds(std::vector<Drift>& out, const json& o, const json& n) {
  std::set<std::string> keys;
  for (const json* s : {at(o, {"seeds"}), at(n, {"seeds"})})
    if (s && s->is_object())
      for (const auto& [k, _] : s->items()) keys.insert(k);
  for (const auto& k : keys) cmp(out, "seeds." + k, at(o, {"seeds", k.c_str()}), at(n, {"seeds", k.c_str()}));
}

// Dependency versions.
void compare_dependencies(std::vector<Drift>& out, const json& o, const json& n) {
  for (const char* k : {"version", "git_commit", "git_dirty", "build_type"})
    cmp_path(out, std::string("dependencies.anchor.") + k, o, n, {"dependencies", "anchor", k});
  for (const char* k :
       {"libtorch", "cuda_runtime", "cuda_driver", "cudnn", "nccl", "hip_runtime", "miopen", "compiler", "glibc"})
    cmp_path(out, std::string("dependencies.") + k, o, n, {"dependencies", k});
  for (const char* k : {"pretty_name", "sysname", "release", "machine"})
    cmp_path(out, std::string("dependencies.os.") + k, o, n, {"dependencies", "os", k});
}

// Shared libraries, by path: a changed digest always counts; one side only
// counts unless the library is loaded on demand.
void compare_libraries(std::vector<Drift>& out, const json& o, const json& n) {
  auto ia = index_by(at(o, {"dependencies", "shared_libraries"}), "path");
  auto ib = index_by(at(n, {"dependencies", "shared_libraries"}), "path");
  std::set<std::string> names;
  for (const auto& [k, _] : ia) names.insert(k);
  for (const auto& [k, _] : ib) names.insert(k);
  for (const auto& name : names) {
    auto fa = ia.find(name);
    auto fb = ib.find(name);
    std::string what = "library " + name;
    if (fb == ib.end()) {
      if (!on_demand_library(name)) out.push_back({what, short_file(*fa->second), "(not loaded)"});
    } else if (fa == ia.end()) {
      if (!on_demand_library(name)) out.push_back({what, "(not loaded)", short_file(*fb->second)});
    } else if (!same_content(*fa->second, *fb->second)) {
      out.push_back({what, short_file(*fa->second), short_file(*fb->second)});
    }
  }
}

// A program's Python distributions keyed by name and place ("torch (/usr/lib/python3/site-packages)").
std::map<std::string, const json*> python_distributions(const json* arr) {
  std::map<std::string, const json*> m;
  if (!arr || !arr->is_array()) return m;
  for (const auto& d : *arr) {
    const json* name = at(d, {"name"});
    const json* dir = at(d, {"dist_info"});
    if (!name || !name->is_string() || !dir || !dir->is_string()) continue;
    const std::string place = dir->get<std::string>();
    m.emplace(name->get<std::string>() + " (" + place.substr(0, place.rfind('/')) + ")", &d);
  }
  return m;
}

std::string show_distribution(const json& d) {
  const json* v = at(d, {"version"});
  const json* r = at(d, {"record_sha256"});
  return (v && v->is_string() ? v->get<std::string>() : std::string("?")) + " " +
         (r && r->is_string() ? r->get<std::string>().substr(0, 12) + "..." : std::string("(no RECORD)"));
}

// Each Python distribution by name and place (version and RECORD digest).
void compare_distributions(std::vector<Drift>& out, const json& o, const json& n) {
  auto da2 = python_distributions(at(o, {"program", "python", "distributions"}));
  auto db2 = python_distributions(at(n, {"program", "python", "distributions"}));
  std::set<std::string> names;
  for (const auto& [k, _] : da2) names.insert(k);
  for (const auto& [k, _] : db2) names.insert(k);
  for (const auto& name : names) {
    auto fa = da2.find(name);
    auto fb = db2.find(name);
    const std::string what = "python package " + name;
    if (fb == db2.end())
      out.push_back({what, show_distribution(*fa->second), "(removed)"});
    else if (fa == da2.end())
      out.push_back({what, "(added)", show_distribution(*fb->second)});
    else if (show_distribution(*fa->second) != show_distribution(*fb->second))
      out.push_back({what, show_distribution(*fa->second), show_distribution(*fb->second)});
  }
}

// A program pilot's program (docs/program.md, "What is pinned"): its
// sources by path, the interpreter, and each Python distribution by name and
// place (version and RECORD digest).
void compare_program(std::vector<Drift>& out, const json& o, const json& n) {
  if (!at(o, {"program"}) && !at(n, {"program"})) return;
  cmp_files(out, "program source", at(o, {"program", "sources"}), at(n, {"program", "sources"}), "path");
  const json* a = at(o, {"program", "interpreter"});
  const json* b = at(n, {"program", "interpreter"});
  if (!(a && b && same_content(*a, *b)))
    out.push_back({"program interpreter", a ? short_file(*a) : "(absent)", b ? short_file(*b) : "(absent)"});
  compare_distributions(out, o, n);
  for (const char* k : {"python", "anchor_pilot"})
    cmp_path(out, std::string("program.runtime.") + k, o, n, {"program", "runtime", k});
}

// Host and device facts (hostname is not one: the same hardware under
// another name computes the same result).
void compare_host_and_device(std::vector<Drift>& out, const json& o, const json& n) {
  for (const char* k : {"cpu_model", "cpu_count", "memory_total_bytes"})
    cmp_path(out, std::string("host.") + k, o, n, {"host", k});
  for (const char* k : {"configured", "accelerator", "count"})
    cmp_path(out, std::string("device.") + k, o, n, {"device", k});
  const json* a = at(o, {"device", "devices"});
  const json* b = at(n, {"device", "devices"});
  std::size_t na = a && a->is_array() ? a->size() : 0;
  std::size_t nb = b && b->is_array() ? b->size() : 0;
  for (std::size_t i = 0; i < std::max(na, nb); ++i)
    cmp(out, "device.devices[" + std::to_string(i) + "]", i < na ? &(*a)[i] : nullptr, i < nb ? &(*b)[i] : nullptr);
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})
    cmp_path(out, std::string("device.visible_devices.") + k, o, n, {"device", "visible_devices", k});
}

}  // namespace

std::vector<Drift> compare(const json& o, const json& n) {
  std::vector<Drift> out;
  cmp_path(out, "format", o, n, {"format"});
  compare_data(out, o, n);
  // Model: source and each file by role (weights, torchscript).
  cmp_path(out, "model.source", o, n, {"model", "source"});
  cmp_files(out, "model", at(o, {"model", "files"}), at(n, {"model", "files"}), "role");
  compare_config(out, o, n);
  compare_seeds(out, o, n);
  compare_dependencies(out, o, n);
  compare_libraries(out, o, n);
  compare_program(out, o, n);
  // Container.
  cmp_path(out, "container.digest", o, n, {"container", "digest"});
  cmp_path(out, "container.containerised", o, n, {"container", "containerised"});
  compare_host_and_device(out, o, n);
  return out;
}

std::string format_drift_table(const std::vector<Drift>& raw, const std::string& old_header,
                               const std::string& new_header) {
  if (raw.empty()) return "no drift\n";
  std::vector<Drift> drift;
  drift.reserve(raw.size());
  for (const auto& d : raw)
    drift.push_back({for_terminal(d.what), for_terminal(d.old_value), for_terminal(d.new_value)});
  std::size_t w0 = 4, w1 = old_header.size();
  for (const auto& d : drift) {
    w0 = std::max(w0, d.what.size());
    w1 = std::max(w1, d.old_value.size());
  }
  auto row = [&](const std::string& a, const std::string& b, const std::string& c) {
    std::string s = a + std::string(w0 - a.size() + 2, ' ') + b + std::string(w1 - b.size() + 2, ' ') + c;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::size_t w2 = new_header.size();
  for (const auto& d : drift) w2 = std::max(w2, d.new_value.size());
  std::string out = row("WHAT", old_header, new_header);
  out += row(std::string(w0, '-'), std::string(w1, '-'), std::string(w2, '-'));
  for (const auto& d : drift) out += row(d.what, d.old_value, d.new_value);
  return out;
}

}  // namespace anchor::manifest
