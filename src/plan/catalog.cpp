#include "anchor/plan/catalog.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <yaml-cpp/yaml.h>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"

namespace anchor::plan {
namespace {

using config::Problem;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// Walks the document and collects every problem; never throws on content.
class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  Catalog load(const std::string& text) {
    Catalog cat;
    cat.path = file_;
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      add(e.mark, "", "YAML syntax error: " + e.msg);
      return cat;
    }
    if (!root.IsMap()) {
      add(root.Mark(), "", "expected a mapping with keys (currency, devices)");
      return cat;
    }
    std::string currency = "USD";
    YAML::Node devices;
    keys(root, "", {"currency", "devices"});
    if (root["currency"]) currency = str(root["currency"], "currency");
    if (!root["devices"]) {
      add(root.Mark(), "devices", "missing: the list of devices");
    } else if (!root["devices"].IsSequence()) {
      add(root["devices"].Mark(), "devices", "expected a list of devices");
    } else {
      std::map<std::string, int> seen;
      int i = 0;
      for (const auto& d : root["devices"]) {
        const std::string where = "devices[" + std::to_string(i++) + "]";
        if (!d.IsMap()) {
          add(d.Mark(), where, "expected a mapping (name, platform, memory_gb, ...)");
          continue;
        }
        Device dev = device(d, where);
        dev.currency = currency;
        if (!dev.name.empty()) {
          auto [it, fresh] = seen.emplace(dev.name, d["name"].Mark().line + 1);
          if (!fresh)
            add(d["name"].Mark(), where + ".name",
                "duplicate device name '" + dev.name + "' (first on line " + std::to_string(it->second) + ")");
        }
        cat.devices.push_back(std::move(dev));
      }
      if (i == 0) add(root["devices"].Mark(), "devices", "the list is empty; give at least one");
    }
    return cat;
  }

  std::vector<Problem>& problems() { return problems_; }

 private:
  Device device(const YAML::Node& d, const std::string& where) {
    Device dev;
    keys(d, where,
         {"name", "platform", "memory_gb", "bf16_tflops", "memory_bandwidth_tbps", "interconnect", "network",
          "price_per_gpu_hour", "notes"});
    dev.name = required_str(d, "name", where);
    dev.platform = required_str(d, "platform", where);
    if (!dev.platform.empty() && dev.platform != "cuda" && dev.platform != "rocm")
      add(d["platform"].Mark(), where + ".platform", "'" + dev.platform + "' is not one of: cuda, rocm");
    dev.memory_gb = positive(d, "memory_gb", where);
    dev.bf16_tflops = positive(d, "bf16_tflops", where);
    dev.memory_bandwidth_tbps = positive(d, "memory_bandwidth_tbps", where);
    if (d["notes"]) dev.notes = str(d["notes"], where + ".notes");
    if (const YAML::Node ic = d["interconnect"]; !ic) {
      add(d.Mark(), where + ".interconnect", "missing (a mapping: name, gb_per_s)");
    } else if (!ic.IsMap()) {
      add(ic.Mark(), where + ".interconnect",
          "expected a mapping with keys (name, gb_per_s, allreduce_busbw_gb_per_s, latency_us)");
    } else {
      keys(ic, where + ".interconnect", {"name", "gb_per_s", "allreduce_busbw_gb_per_s", "latency_us"});
      dev.interconnect = required_str(ic, "name", where + ".interconnect");
      dev.interconnect_gbps = positive(ic, "gb_per_s", where + ".interconnect");
      dev.allreduce_busbw_gbps = positive(ic, "allreduce_busbw_gb_per_s", where + ".interconnect", true);
      dev.interconnect_latency_us = positive(ic, "latency_us", where + ".interconnect", true);
    }
    if (const YAML::Node nw = d["network"]; nw && !nw.IsMap()) {
      add(nw.Mark(), where + ".network", "expected a mapping with keys (name, gb_per_s, latency_us)");
    } else if (nw) {
      keys(nw, where + ".network", {"name", "gb_per_s", "latency_us"});
      dev.network = required_str(nw, "name", where + ".network");
      dev.network_gbps = positive(nw, "gb_per_s", where + ".network");
      dev.network_latency_us = positive(nw, "latency_us", where + ".network", true);
    }
    if (const YAML::Node pr = d["price_per_gpu_hour"]; !pr) {
      add(d.Mark(), where + ".price_per_gpu_hour",
          "missing (a mapping: on_demand, term_7_day, term_30_day; example prices are fine)");
    } else if (!pr.IsMap()) {
      add(pr.Mark(), where + ".price_per_gpu_hour",
          "expected a mapping with keys (on_demand, term_7_day, term_30_day)");
    } else {
      keys(pr, where + ".price_per_gpu_hour", {"on_demand", "term_7_day", "term_30_day"});
      // Optional: a catalog written before it (one a bundle carries) still loads.
      dev.price_on_demand = positive(pr, "on_demand", where + ".price_per_gpu_hour", true);
      dev.price_7_day = positive(pr, "term_7_day", where + ".price_per_gpu_hour");
      dev.price_30_day = positive(pr, "term_30_day", where + ".price_per_gpu_hour");
    }
    return dev;
  }

  void keys(const YAML::Node& map, const std::string& where, const std::vector<std::string>& ok) {
    std::set<std::string> allowed(ok.begin(), ok.end());
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
      if (!allowed.count(k))
        add(it->first.Mark(), where.empty() ? k : where + "." + k,
            "unknown key '" + k + "'; " + (where.empty() ? std::string("the top level") : where) +
                " accepts: " + join(ok));
    }
  }

  std::string str(const YAML::Node& n, const std::string& key) {
    if (!n.IsScalar()) {
      add(n.Mark(), key, "expected a string");
      return "";
    }
    return n.Scalar();
  }

  std::string required_str(const YAML::Node& map, const char* name, const std::string& where) {
    const YAML::Node n = map[name];
    if (!n || n.IsNull()) {
      add(map.Mark(), where + "." + name, "missing (a string)");
      return "";
    }
    std::string s = str(n, where + "." + name);
    if (s.empty() && n.IsScalar()) add(n.Mark(), where + "." + name, "must not be empty");
    return s;
  }

  // The number > 0 at map[name]; a problem when it is not one. When it is
  // absent: 0, and a problem unless `optional`.
  double positive(const YAML::Node& map, const char* name, const std::string& where, bool optional = false) {
    const std::string key = where + "." + name;
    const YAML::Node n = map[name];
    if (!n || n.IsNull()) {
      if (!optional) add(map.Mark(), key, "missing (a number > 0)");
      return 0;
    }
    if (!n.IsScalar()) {
      add(n.Mark(), key, "expected a number > 0, got a " + std::string(n.IsMap() ? "mapping" : "list"));
      return 0;
    }
    const std::string& s = n.Scalar();
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || s.empty() || !std::isfinite(v)) {
      add(n.Mark(), key, "'" + s + "' is not a number; expected a number > 0");
      return 0;
    }
    if (!(v > 0)) {
      add(n.Mark(), key, s + " is not > 0");
      return 0;
    }
    return v;
  }

  void add(const YAML::Mark& m, const std::string& key, std::string message) {
    Problem p;
    p.file = file_;
    if (!m.is_null()) {
      p.line = m.line + 1;
      p.column = m.column + 1;
    }
    p.key = key;
    p.message = std::move(message);
    problems_.push_back(std::move(p));
  }

  std::string file_;
  std::vector<Problem> problems_;
};

std::string error_text(const std::string& file, const std::vector<Problem>& problems) {
  std::string out =
      "catalog " + file + " has " + std::to_string(problems.size()) + (problems.size() == 1 ? " problem" : " problems");
  for (const auto& p : problems) out += "\n  " + p.format();
  return out;
}

}  // namespace

const Device* Catalog::find(const std::string& name) const {
  for (const auto& d : devices)
    if (d.name == name) return &d;
  return nullptr;
}

CatalogError::CatalogError(const std::string& file, std::vector<config::Problem> problems)
    : Error(ErrorKind::kConfig, error_text(file, problems),
            "see docs/plan.md for the catalog format (every device needs name, platform, "
            "memory_gb, bf16_tflops, memory_bandwidth_tbps, interconnect, price_per_gpu_hour)"),
      problems_(std::move(problems)) {}

Catalog load_catalog_string(const std::string& yaml, const std::string& name) {
  Loader loader(name);
  Catalog c = loader.load(yaml);
  if (!loader.problems().empty()) throw CatalogError(name, loader.problems());
  c.sha256 = sha256_hex(yaml);
  return c;
}

std::string find_catalog(const config::Config& cfg, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  std::vector<std::string> tried;
  if (!cfg.budget.catalog.empty()) tried.push_back(config::resolve_path(cfg, cfg.budget.catalog));
  tried.push_back("configs/catalog.yaml");
  // Beside the binary: <prefix>/bin/anchor finds <prefix>/share/anchor/catalog.yaml
  // (the build tree has the same layout: src/CMakeLists.txt copies it there).
  const std::string exe = proc::self_exe();
  if (const auto slash = exe.rfind('/'); slash != std::string::npos)
    tried.push_back(exe.substr(0, slash) + "/../share/anchor/catalog.yaml");
  for (const auto& t : tried) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(t, ec)) return t;
  }
  throw Error(ErrorKind::kUsage, "no device catalog found (tried " + join(tried) + ")",
              "set budget.catalog in the config (relative to its directory; `anchor plan` also takes "
              "--catalog FILE), or install anchor (cmake --install: the catalog lands in "
              "<prefix>/share/anchor/, beside bin/); configs/catalog.yaml in the source tree is the "
              "shipped one (docs/plan.md)");
}

Catalog load_catalog(const std::string& path) { return load_catalog_string(fs::read_file(path), path); }

}  // namespace anchor::plan
