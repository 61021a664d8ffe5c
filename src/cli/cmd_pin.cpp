// anchor pin CONFIG [--set k=v]... [-o manifest.json] [--no-cache] [--threads N]
// anchor pin --check MANIFEST [--no-cache] [--threads N] [-o fresh.json]
#include <cstdio>
#include <iostream>
#include <memory>

#include "anchor/common/units.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/manifest/process_facts.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct PinCliOptions {
  std::string config_file;
  std::string check_manifest;
  std::vector<std::string> overrides;
  std::string output = "manifest.json";
  bool no_cache = false;
  bool no_progress = false;
  bool json = false;
  int threads = 0;
};

// One line on stderr: what was pinned and how much came from the cache.
void print_summary(const nlohmann::json& m, const std::string& verb) {
  const auto& h = m["hashing"];
  std::size_t shards = m["data"]["train"]["files"].size() + m["data"]["val"]["files"].size();
  std::uint64_t data_bytes =
      m["data"]["train"]["bytes"].get<std::uint64_t>() + m["data"]["val"]["bytes"].get<std::uint64_t>();
  std::fprintf(stderr,
               "anchor pin: %s %zu data file(s) (%s), %zu model file(s), %zu shared libraries; "
               "config %s; read %zu file(s) (%s), %zu from cache, %d thread(s), %.2f s\n",
               verb.c_str(), shards, human_bytes(double(data_bytes)).c_str(), m["model"]["files"].size(),
               m["dependencies"]["shared_libraries"].size(),
               m["config"]["digest"].get<std::string>().substr(0, 12).c_str(), h["files_hashed"].get<std::size_t>(),
               human_bytes(double(h["bytes_hashed"].get<std::uint64_t>())).c_str(),
               h["files_cached"].get<std::size_t>(), h["threads"].get<int>(), h["seconds"].get<double>());
}

// The manifest pins the libraries of a process that trains (docs/manifest.md,
// "Which process is pinned"). In anchor-torch that is this process (empty: pin
// reads them itself); the front end asks anchor-torch, or reuses its last
// answer while nothing it rests on changed.
void set_training_process(manifest::PinOptions& popts, const config::Config& c) {
  if (torch_in_process()) return;
  const bool use_cache = popts.use_cache;
  const std::string device = c.device;
  popts.process = [use_cache, device] { return manifest::training_process_facts(torch_binary(), device, use_cache); };
}

// The options whose presence decides what `anchor pin` does.
struct PinCliFlags {
  CLI::Option* config;
  CLI::Option* check;
  CLI::Option* output;
};

PinCliFlags add_pin_options(CLI::App& sub, PinCliOptions& o) {
  sub.description(
      "Pin every input that decides the run (data and model digests, effective config, seeds, "
      "dependency versions and loaded libraries, container, host and devices) into a manifest "
      "(docs/manifest.md). With --check, re-pin against an existing manifest and print what "
      "drifted (exit 3 when anything did).");
  auto* cfg = sub.add_option("config", o.config_file, "config YAML to pin")->type_name("FILE");
  auto* check = sub.add_option("--check", o.check_manifest,
                               "re-pin with the config stored in MANIFEST and print the drift "
                               "table; exit 3 on drift, 0 otherwise")
                    ->type_name("FILE")
                    ->type_name("MANIFEST");
  auto* set =
      sub.add_option("--set", o.overrides, "override a config key: --set data.seq_len=128")->type_name("KEY=VALUE");
  auto* out = sub.add_option("-o,--output", o.output,
                             "where to write the manifest (atomically); with --check, written "
                             "only when given")
                  ->type_name("FILE")
                  ->capture_default_str();
  sub.add_flag("--no-cache", o.no_cache,
               "hash every file and ask anchor-torch what it loads; neither read nor write the caches "
               "(hash-cache.json, process-facts.json in $ANCHOR_CACHE_DIR, else $XDG_CACHE_HOME/anchor, "
               "else ~/.cache/anchor)");
  with_env(sub.add_option("--threads", o.threads, "hashing threads; 0 = one per CPU (default 0)")
               ->check(whole_number_at_least(0)),
           "ANCHOR_HASH_THREADS");
  auto* as_json = sub.add_flag("--json", o.json,
                               "with --check: print {manifest, drifted, drift: [{what, old, new}]} as JSON on stdout "
                               "instead of the drift table");
  as_json->needs(check);
  sub.add_flag("--no-progress", o.no_progress, "never show the progress line (shown only on a terminal after 1 s)");
  cfg->excludes(check);
  set->excludes(check);
  return {cfg, check, out};
}

// anchor pin CONFIG: pins it into o.output.
ExitCode pin_config(const PinCliOptions& o, bool config_given, manifest::PinOptions& popts) {
  if (!config_given)
    throw Error(ErrorKind::kUsage, "pin: give a CONFIG to pin, or --check MANIFEST",
                "anchor pin configs/pilot.yaml   |   anchor pin --check manifest.json");
  config::Config c = config::load(o.config_file, o.overrides);
  if (!c.program.command.empty())
    throw Error(ErrorKind::kUsage,
                "pin: " + o.config_file +
                    " pilots a program (program.command): its sources, Python packages and "
                    "libraries are known only once it runs",
                "`anchor pilot " + o.config_file +
                    "` pins them into <run dir>/manifest.json; check that one "
                    "later with `anchor pin --check <run dir>/manifest.json`");
  set_training_process(popts, c);
  nlohmann::json m = manifest::pin(c, popts);
  fs::atomic_write_file(o.output, m.dump(2) + "\n");
  print_summary(m, "pinned");
  std::fprintf(stderr, "anchor pin: wrote %s\n", o.output.c_str());
  return ExitCode::kOk;
}

// The manifest --check names, as a JSON object.
nlohmann::json read_manifest(const std::string& path) {
  std::string text = fs::read_file(path);
  nlohmann::json old_m = json_depth(text, kMaxJsonDepth) > kMaxJsonDepth
                             ? nlohmann::json(nlohmann::json::value_t::discarded)
                             : nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (old_m.is_discarded() || !old_m.is_object())
    throw Error(ErrorKind::kConfig, path + ": not a JSON document", "pass a manifest.json written by `anchor pin`");
  return old_m;
}

// anchor pin --check MANIFEST: re-pins with its config and prints the drift
// (the table, or --json); exit 3 when anything drifted.
ExitCode check_manifest(const PinCliOptions& o, bool output_given, manifest::PinOptions& popts) {
  const nlohmann::json old_m = read_manifest(o.check_manifest);
  config::Config c = manifest::config_from_manifest(old_m);
  nlohmann::json new_m;
  if (old_m.contains("program")) {
    new_m = manifest::repin_program_manifest(o.check_manifest, old_m, c, popts);
  } else {
    set_training_process(popts, c);
    new_m = manifest::pin(c, popts);
  }
  if (output_given) fs::atomic_write_file(o.output, new_m.dump(2) + "\n");
  auto drift = manifest::compare(old_m, new_m);
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& d : drift) rows.push_back({{"what", d.what}, {"old", d.old_value}, {"new", d.new_value}});
    const nlohmann::json doc = {{"manifest", printable(o.check_manifest)}, {"drifted", drift.size()}, {"drift", rows}};
    std::cout << dump_json(doc, 2) << std::endl;
  } else {
    std::cout << manifest::format_drift_table(drift) << std::flush;
  }
  print_summary(new_m, "re-pinned");
  if (drift.empty()) {
    std::fprintf(stderr, "anchor pin: %s: no drift\n", o.check_manifest.c_str());
    return ExitCode::kOk;
  }
  std::fprintf(stderr, "anchor pin: %s: %zu pin(s) drifted\n", o.check_manifest.c_str(), drift.size());
  return ExitCode::kVerification;
}

}  // namespace

// anchor-torch __process-facts --device D: what pin needs of a process that
// trains, as JSON on stdout (manifest::to_json(ProcessFacts)).
Runner setup_process_facts(CLI::App& sub, const GlobalOptions&) {
  sub.group("");  // internal: started by `anchor pin`, not by people
  auto device = std::make_shared<std::string>("cpu");
  sub.add_option("--device", *device, "the configured device (config `device`)");
  return [device]() {
    if (!torch_in_process()) hand_over_to_torch("the facts are those of a process with LibTorch loaded");
    const auto facts = manifest::this_process_facts(*device);
    // On a line of its own, whatever a library printed before it without a newline.
    std::cout << "\n" << manifest::kProcessFactsLine << dump_json(manifest::to_json(facts)) << "\n" << std::flush;
    return ExitCode::kOk;
  };
}

Runner setup_pin(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<PinCliOptions>();
  const PinCliFlags flags = add_pin_options(sub, *o);
  return [o, flags]() {
    manifest::PinOptions popts;
    popts.use_cache = !o->no_cache;
    popts.threads = o->threads;
    popts.progress = !o->no_progress && log::enabled(log::Level::kInfo);  // -q: no progress line either
    if (flags.check->count() == 0) return pin_config(*o, flags.config->count() > 0, popts);
    return check_manifest(*o, flags.output->count() > 0, popts);
  };
}

}  // namespace anchor::cli
