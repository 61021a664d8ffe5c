// manifest::pin: gathers every input that decides a run into one JSON document.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/common/process.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/environment.hpp"
#include "anchor/manifest/hasher.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/manifest/process_facts.hpp"

namespace anchor::manifest {
namespace {

namespace stdfs = std::filesystem;

bool has_glob(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A file named by the config: the path as the user wrote it (relative to the
// config's directory when they wrote it relative) and where it is.
struct Named {
  std::string written;
  std::string absolute;
  std::string label;
};

stdfs::path absolute_of(const std::string& p) {
  stdfs::path path(p);
  if (path.is_relative()) path = stdfs::current_path() / path;
  return path.lexically_normal();
}

// Expands one data list (files and globs) in order; a file listed twice is
// pinned once. Throws Error (kConfig) for a glob that matches nothing.
std::vector<Named> expand_data(const config::Config& cfg, const std::vector<std::string>& entries,
                               const std::string& key) {
  std::vector<Named> out;
  std::set<std::string> seen;
  // The directory relative entries are resolved against.
  stdfs::path base = absolute_of(config::resolve_path(cfg, "x")).parent_path();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    std::string label = key + "[" + std::to_string(i) + "] '" + entry + "'";
    std::string resolved = absolute_of(config::resolve_path(cfg, entry)).string();
    std::vector<std::string> files;
    if (has_glob(entry)) {
      try {
        files = fs::expand_glob(resolved);
      } catch (const Error& e) {
        throw Error(e.kind(), label + ": " + e.what(), e.hint());
      }
    } else {
      files.push_back(resolved);
    }
    for (const auto& f : files) {
      std::string written = entry;
      if (has_glob(entry)) {
        if (stdfs::path(entry).is_absolute()) {
          written = f;
        } else {
          written = stdfs::path(f).lexically_relative(base).string();
          if (written.empty()) written = f;
        }
      }
      if (!seen.insert(written).second) continue;
      out.push_back(Named{written, f, label});
    }
  }
  return out;
}

nlohmann::json file_entry(const std::string& written, const HashResult& r) {
  return {{"path", written}, {"resolved", r.resolved}, {"size", r.size}, {"sha256", r.sha256}, {"cached", r.cached}};
}

// A model file the config names, and its role (weights, torchscript).
struct ModelFile {
  std::string role;
  Named named;
};

// Every file the config names: the data splits, expanded, and the model's.
struct ConfigFiles {
  std::vector<Named> train, val;
  std::vector<ModelFile> model;
};

ConfigFiles config_files(const config::Config& cfg) {
  ConfigFiles f;
  f.train = expand_data(cfg, cfg.data.train, "data.train");
  f.val = expand_data(cfg, cfg.data.val, "data.val");
  auto add_model_file = [&](const std::string& role, const std::string& key, const std::string& p) {
    if (p.empty()) return;
    f.model.push_back({role, Named{p, absolute_of(config::resolve_path(cfg, p)).string(), key + " '" + p + "'"}});
  };
  if (cfg.model.source == "safetensors" && cfg.model.weights.empty())
    throw Error(ErrorKind::kConfig, "model.source is safetensors but model.weights is not set",
                "set model.weights to the .safetensors file, or use model.source: builtin");
  if (cfg.model.source == "torchscript" && cfg.model.torchscript.empty())
    throw Error(ErrorKind::kConfig, "model.source is torchscript but model.torchscript is not set",
                "set model.torchscript to the TorchScript module file");
  add_model_file("weights", "model.weights", cfg.model.weights);
  add_model_file("torchscript", "model.torchscript", cfg.model.torchscript);
  return f;
}

// Everything hashed, in one parallel pass: the config's files in order (train,
// val, model), then the training process's libraries and its executable.
struct Hashed {
  std::vector<HashResult> results;
  std::vector<std::size_t> lib_index;  // per library, its result; SIZE_MAX: deleted, not hashed
  std::size_t exe_index = 0;
  HashStats stats;
  std::string cache_file;  // "" without a cache
};

Hashed hash_everything(const ConfigFiles& files, const ProcessFacts& facts, const PinOptions& opts) {
  Hashed h;
  std::vector<HashInput> inputs;
  for (const auto& n : files.train) inputs.push_back({n.absolute, n.label});
  for (const auto& n : files.val) inputs.push_back({n.absolute, n.label});
  for (const auto& m : files.model) inputs.push_back({m.named.absolute, m.named.label});
  const auto& libs = facts.libraries;
  h.lib_index.assign(libs.size(), SIZE_MAX);
  for (std::size_t i = 0; i < libs.size(); ++i) {
    if (libs[i].deleted) continue;
    h.lib_index[i] = inputs.size();
    inputs.push_back({libs[i].path, "shared library"});
  }
  h.exe_index = inputs.size();
  inputs.push_back(
      {facts.executable, facts.source == "program" ? "the program's executable" : "the anchor executable"});

  std::optional<HashCache> cache;
  if (opts.use_cache) {
    try {
      cache.emplace(opts.cache_file.empty() ? HashCache::default_file() : opts.cache_file);
    } catch (const Error& e) {
      ANCHOR_LOG_WARN("pin", "hash cache disabled: {}", e.what());
    }
  }
  HashOptions hopts;
  hopts.threads = opts.threads;
  hopts.cache = cache ? &*cache : nullptr;
  hopts.progress = opts.progress;
  h.results = hash_files(inputs, hopts, &h.stats);
  if (cache && h.stats.files_hashed > 0) {
    try {
      cache->save();
    } catch (const Error& e) {
      ANCHOR_LOG_WARN("pin", "could not write the hash cache {}: {}", cache->file(), e.what());
    }
  }
  if (cache) h.cache_file = cache->file();
  return h;
}

// One data split: its files with their digests, from results[k] on (k advances).
nlohmann::json data_split(const std::vector<Named>& files, const std::vector<std::string>& patterns,
                          const std::vector<HashResult>& results, std::size_t& k) {
  nlohmann::json arr = nlohmann::json::array();
  std::vector<std::pair<std::string, std::string>> pairs;
  std::uint64_t bytes = 0;
  for (const auto& n : files) {
    const HashResult& r = results[k++];
    arr.push_back(file_entry(n.written, r));
    pairs.emplace_back(r.sha256, n.written);
    bytes += r.size;
  }
  return nlohmann::json{{"patterns", patterns},
                        {"files", std::move(arr)},
                        {"count", files.size()},
                        {"bytes", bytes},
                        {"digest", set_digest(pairs)}};
}

nlohmann::json data_section(const config::Config& cfg, const ConfigFiles& files, const Hashed& h, std::size_t& k) {
  nlohmann::json data;
  data["format"] = cfg.data.format;
  data["seq_len"] = cfg.data.seq_len;
  data["train"] = data_split(files.train, cfg.data.train, h.results, k);
  data["val"] = data_split(files.val, cfg.data.val, h.results, k);
  data["val"]["split_from_train"] = cfg.data.val.empty();
  data["val"]["val_fraction"] = cfg.data.val.empty() ? nlohmann::json(cfg.data.val_fraction) : nlohmann::json(nullptr);
  return data;
}

nlohmann::json model_section(const config::Config& cfg, const ConfigFiles& files, const Hashed& h, std::size_t& k) {
  nlohmann::json model;
  model["source"] = cfg.model.source;
  model["arch"] = {{"arch", cfg.model.arch},
                   {"n_layer", cfg.model.n_layer},
                   {"n_head", cfg.model.n_head},
                   {"n_embd", cfg.model.n_embd},
                   {"vocab_size", cfg.model.vocab_size},
                   {"block_size", cfg.model.block_size},
                   {"dropout", cfg.model.dropout},
                   {"bias", cfg.model.bias}};
  model["files"] = nlohmann::json::array();
  for (const auto& mf : files.model) {
    nlohmann::json e = file_entry(mf.named.written, h.results[k++]);
    e["role"] = mf.role;
    model["files"].push_back(std::move(e));
  }
  return model;
}

// Every seed derived from run.seed, and each rank's dropout stream.
nlohmann::json seeds_section(const config::Config& cfg, const PinOptions& opts) {
  const std::uint64_t root = cfg.run.seed;
  nlohmann::json seeds = {{"root", root}};
  for (const char* purpose : {"init", "data", "dropout", "eval"}) seeds[purpose] = config::derive_seed(root, purpose);
  // Each rank's own stream (config::dropout_purpose); rank 0's is "dropout".
  const int ranks = opts.world_size > 0 ? opts.world_size : std::max(1, cfg.distributed.nproc_per_node);
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) per_rank.push_back(config::derive_seed(root, config::dropout_purpose(r)));
  seeds["dropout_per_rank"] = std::move(per_rank);
  return seeds;
}

// The runtime the training process reported, anchor's build, the system, the
// executable and every loaded shared library with its digest.
nlohmann::json dependencies_section(nlohmann::json runtime, const ProcessFacts& facts, const Hashed& h) {
  nlohmann::json deps = std::move(runtime);
  deps["anchor"] = {{"version", build::kVersion},
                    {"git_commit", build::kGitCommit},
                    {"git_dirty", build::kGitDirty},
                    {"build_type", build::kBuildType}};
  deps["compiler"] = build::kCompiler;
  deps["glibc"] = glibc_version();
  deps["os"] = os_info();
  const HashResult& exe = h.results[h.exe_index];
  deps["executable"] = {{"path", facts.executable}, {"size", exe.size}, {"sha256", exe.sha256}, {"cached", exe.cached}};
  nlohmann::json libs_json = nlohmann::json::array();
  for (std::size_t i = 0; i < facts.libraries.size(); ++i) {
    const auto& lib = facts.libraries[i];
    nlohmann::json e = {{"path", lib.path}};
    if (h.lib_index[i] == SIZE_MAX) {
      e["deleted"] = true;  // mapped file removed on disk: its bytes cannot be hashed
      e["size"] = nullptr;
      e["sha256"] = nullptr;
    } else {
      const HashResult& r = h.results[h.lib_index[i]];
      e["size"] = r.size;
      e["sha256"] = r.sha256;
      e["cached"] = r.cached;
    }
    if (lib.replaced_since_load) e["replaced_since_load"] = true;
    libs_json.push_back(std::move(e));
  }
  deps["shared_libraries"] = std::move(libs_json);
  return deps;
}

nlohmann::json hashing_section(const Hashed& h, const ProcessFacts& facts) {
  const auto& st = h.stats;
  return {{"threads", st.threads},
          {"cache", h.cache_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(h.cache_file)},
          {"files_hashed", st.files_hashed},
          {"files_cached", st.files_cached},
          {"bytes_hashed", st.bytes_hashed},
          {"bytes_cached", st.bytes_cached},
          {"seconds", st.seconds},
          {"training_process", {{"source", facts.source}, {"seconds", facts.seconds}}}};
}

}  // namespace

nlohmann::json pin(const config::Config& cfg, const PinOptions& opts) {
  // Cheap policy checks first: a config error should not wait for hashing.
  nlohmann::json container = container_info(cfg.container.digest, cfg.container.required);
  const ConfigFiles files = config_files(cfg);
  // What only the training process can tell: given (the front end asked
  // anchor-torch; a program pilot read its worker), else this process's.
  ProcessFacts facts = opts.process ? opts.process() : this_process_facts(cfg.device);
  const Hashed hashed = hash_everything(files, facts, opts);

  nlohmann::json m;
  m["format"] = kFormat;
  m["created_at"] = utc_now();
  std::size_t k = 0;  // the config's files' results, in hashing order: data, then model
  nlohmann::json data = data_section(cfg, files, hashed, k);
  m["model"] = model_section(cfg, files, hashed, k);
  m["data"] = std::move(data);
  m["config"] = {{"digest", config::digest(cfg)}, {"effective", config::to_json(cfg)}};
  set_path_field(m["config"], "source", cfg.source_path);  // read back by reproduce: exact bytes kept
  set_path_field(m["config"], "base_dir", cfg.base_dir);
  m["seeds"] = seeds_section(cfg, opts);
  m["dependencies"] = dependencies_section(std::move(facts.runtime), facts, hashed);
  m["container"] = std::move(container);
  m["host"] = host_info();
  m["device"] = std::move(facts.device);
  m["hashing"] = hashing_section(hashed, facts);
  // Paths (inputs, libraries, the working directory) may hold any byte; the
  // manifest is JSON, written, hashed and signed as text: valid UTF-8 only.
  return printable_json(m);
}

config::Config config_from_manifest(const nlohmann::json& m) {
  if (!m.is_object() || !m.contains("format") || !m["format"].is_string())
    throw Error(ErrorKind::kConfig, "not an anchor manifest: no \"format\" field",
                "pass a manifest.json written by `anchor pin`");
  std::string format = m["format"].get<std::string>();
  if (format != kFormat)
    throw Error(ErrorKind::kConfig, "unsupported manifest format '" + format + "' (this anchor reads " + kFormat + ")",
                "re-pin with this anchor, or use the anchor version that wrote it");
  if (!m.contains("config") || !m["config"].is_object() || !m["config"].contains("effective"))
    throw Error(ErrorKind::kConfig, "manifest has no config.effective section",
                "the manifest is truncated or was edited; re-pin from the config file");
  const auto& c = m["config"];
  const std::string base_dir = path_field(c, "base_dir");
  config::Config cfg = config::from_json(c["effective"], base_dir);
  cfg.base_dir = base_dir;
  if (c.contains("source")) cfg.source_path = path_field(c, "source");
  return cfg;
}

}  // namespace anchor::manifest
