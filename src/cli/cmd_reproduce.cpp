// anchor reproduce REPORT: verify a past run's report, re-pin and show the
// drift, re-run the pilot with the recorded effective config and seeds in a
// new run directory, and compare the results stage by stage.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/manifest/path_map.hpp"
#include "anchor/pipeline/bundle.hpp"
#include "anchor/pipeline/pilot.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/statement.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

// Where an informational line goes ("reproduce: no drift ..."): stderr at the
// default level, nowhere under -q (--log-level warn and above). Warnings, the
// drift that refuses a re-run and errors are written whatever the level.
std::ostream& note() {
  static std::ostringstream discarded;
  if (log::enabled(log::Level::kInfo)) return std::cerr;
  discarded.str("");
  return discarded;
}

struct ReproduceOptions {
  std::string report;
  std::string key;
  std::string run_dir;
  std::string checkpoint_dir;
  std::string signing_key;
  bool allow_drift = false;
  bool allow_unsigned = false;
  bool use_cache = true;
  bool json = false;
  std::string junit;
  std::string root;              // --root: where the config's directory is now
  std::vector<std::string> map;  // --map OLD=NEW, repeatable
  // From a bundle (pipeline::open_bundle): the envelope is checked alone (the
  // run's other files are not there), and the bundle's catalog plans.
  bool envelope_only = false;
  std::string catalog;
};

// How the report was checked, for the reproduction's `reproduces`.
struct Trust {
  bool verified = false;
  // {path, key_id, source}: the key the signature verified with and why it
  // was used; null for an unsigned report.json.
  nlohmann::json key;
  std::string sha256;  // of the bytes checked and used (one read)
};

// What `reproduces.key.source` says for a key anchor did not get from the user.
constexpr const char* kKeyBesideReport = "report.pub beside the report (not independently trusted)";

// The report inside a verified envelope, or a plain report.json (unverified).
nlohmann::json load_report(const ReproduceOptions& o, Trust& trust) {
  const std::string text = fs::read_file(o.report);
  nlohmann::json doc;
  try {
    doc = parse_json(text);
  } catch (const nlohmann::json::parse_error&) {
    doc = nlohmann::json(nlohmann::json::value_t::discarded);
  }
  if (doc.is_discarded())
    throw Error(ErrorKind::kVerification, o.report + " is not JSON", "give a report.intoto.json or report.json");
  if (doc.contains("payloadType")) {
    report::VerifyOptions vo;
    vo.public_key_path = o.key;
    vo.check_files = !o.envelope_only;
    auto v = report::verify_envelope(o.report, vo);
    // As `anchor verify` prints them: without --key, that the key came with
    // the run and proves integrity, not who signed it.
    for (const auto& w : v.warnings) std::cerr << "reproduce: warn  " << w << "\n";
    if (!v.ok) {
      std::string all;
      for (const auto& f : v.failures) all += "\n  " + f;
      throw Error(ErrorKind::kVerification, "the report does not verify:" + all,
                  "a report that fails `anchor verify` cannot be reproduced faithfully");
    }
    trust.verified = true;
    trust.key = {{"path", std::filesystem::absolute(v.public_key_path).lexically_normal().string()},
                 {"key_id", v.key_id},
                 {"source", o.key.empty() ? kKeyBesideReport : "--key"}};
    note() << "reproduce: the report verifies with key " << v.key_id << " (" << trust.key["source"].get<std::string>()
           << ": " << trust.key["path"].get<std::string>() << ")\n";
    // The payload of the bytes verify read and checked, not of another read.
    trust.sha256 = sha256_hex(v.envelope_text);
    auto env = report::envelope_from_json(v.envelope_text);
    return parse_json(env.payload).at("predicate").at("report");
  }
  if (!o.allow_unsigned)
    throw Error(ErrorKind::kVerification, o.report + " is an unsigned report.json: it cannot be verified",
                "reproduce from report.intoto.json, or pass --allow-unsigned to re-run it anyway");
  ANCHOR_LOG_WARN("reproduce", "UNVERIFIED: {} is unsigned; reproducing it proves nothing about who ran it", o.report);
  trust.verified = false;
  trust.key = nullptr;
  trust.sha256 = sha256_hex(text);
  return doc;
}

// The catalog a bundle carries is the one the run planned with: the signed
// report's plan records its digest. A report from before anchor recorded it
// gets a warning.
void check_bundle_catalog(const std::string& catalog, const nlohmann::json& original) {
  const auto recorded = pipeline::recorded_catalog(original);  // the rule `anchor bundle` copies by
  if (catalog.empty()) {
    // A bundle without catalog.yaml plans with whatever catalog this machine has:
    // not the run's, when the run recorded which one it used.
    if (recorded)
      throw Error(ErrorKind::kVerification,
                  "the bundle holds no catalog.yaml, but the run planned with a catalog it records (sha256 " +
                      recorded->second + ")",
                  "make the bundle again from the run (`anchor bundle RUN`): it carries that catalog");
    return;
  }
  if (!recorded) {
    std::cerr << "reproduce: warn  the report records no catalog digest: the bundle's catalog.yaml plans, unchecked\n";
    return;
  }
  const std::string got = sha256_file(catalog).sha256;
  if (recorded->second != got)
    throw Error(ErrorKind::kVerification,
                "the bundle's catalog.yaml (sha256 " + got + ") is not the catalog the run planned with (sha256 " +
                    recorded->second + ")",
                "make the bundle again from the run (`anchor bundle RUN`)");
}

// bundle.json is not signed: where it says the inputs are must be where the
// signed manifest puts them, or a reproduction could read them elsewhere.
void check_bundle_places(const pipeline::OpenedBundle& b, const nlohmann::json& original) {
  pipeline::InputPlaces want;
  try {
    want = pipeline::input_places(original.at("manifest"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kVerification,
                std::string("the signed report's manifest cannot place its inputs (") + e.what() + ")");
  }
  if (want.root != b.places.root || want.absolute != b.places.absolute)
    throw Error(ErrorKind::kVerification,
                "bundle.json places the inputs at root '" + printable(b.places.root) + "', absolute '" +
                    printable(b.places.absolute) + "'; the signed manifest puts them at '" + want.root + "', '" +
                    want.absolute + "'",
                "bundle.json was edited: copy the bundle again from where it was made");
}

}  // namespace

Runner setup_reproduce(CLI::App& sub, const GlobalOptions& global) {
  auto o = std::make_shared<ReproduceOptions>();
  sub.add_option("report", o->report,
                 "report.intoto.json of a past run (or report.json with --allow-unsigned), or a bundle directory "
                 "(`anchor bundle`)")
      ->required();
  sub.add_option("--key", o->key,
                 "the signer's public key (SPKI PEM) to verify with (default: report.pub beside the report, which "
                 "shows integrity, not who signed: warned and recorded as such in reproduces.key)");
  sub.add_option("--run-dir", o->run_dir,
                 "run directory for the re-run (default: runs/<new run-id> in the current directory; the report's "
                 "run.output_dir is not used)");
  sub.add_option("--checkpoint-dir", o->checkpoint_dir,
                 "directory the re-run saves its checkpoints in (default: <run dir>/checkpoints; the report's "
                 "checkpoint.dir is not used). Stale temporaries in it are removed; it must hold no step-* directory");
  sub.add_option("--signing-key", o->signing_key,
                 "PKCS#8 PEM private key that signs the re-run's report; default: your per-user key (made on first "
                 "use, as a pilot's); none: the re-run is unsigned. The report's report.signing_key is not used");
  sub.add_option("--root", o->root,
                 "the directory that now holds what the run's config directory held (its relative inputs)")
      ->check(CLI::ExistingDirectory);
  sub.add_option("--map", o->map, "OLD=NEW: a recorded absolute path prefix and where it is now (repeatable)")
      ->type_name("OLD=NEW");
  sub.add_flag("--allow-drift", o->allow_drift, "re-run even when pins drifted (the new report says so)");
  sub.add_flag("--allow-unsigned", o->allow_unsigned, "accept an unsigned report.json (loudly unverified)");
  sub.add_flag_callback(
      "--no-cache", [o] { o->use_cache = false; }, "hash every input again instead of trusting the pin cache");
  sub.add_flag("--json", o->json, "print the new report.json on stdout");
  sub.add_option("--junit", o->junit, "also write a JUnit XML file for the re-run");
  Runner body = [o_cli = o, &global]() {
    // The fresh pin must see the libraries of a process that trains.
    if (!torch_in_process()) hand_over_to_torch("reproduce pins the libraries LibTorch loads");
    auto o = std::make_shared<ReproduceOptions>(*o_cli);
    // A bundle: every file it lists checked first; its envelope, key, catalog and inputs used.
    std::optional<pipeline::OpenedBundle> bundle;
    if (pipeline::is_bundle(o->report)) {
      bundle = pipeline::open_bundle(o->report);
      if (bundle->with_data && (!o->root.empty() || !o->map.empty()))
        throw Error(ErrorKind::kUsage,
                    "the bundle " + printable(bundle->dir) + " carries the run's inputs: --root and --map do not apply",
                    "drop them; they are for a bundle made without --with-data, or a report");
      note() << "reproduce: the bundle " << printable(bundle->dir) << " holds every file it lists, by digest\n";
      o->report = bundle->envelope;
      o->envelope_only = true;
      o->catalog = bundle->catalog;
    }
    Trust trust;
    const nlohmann::json original = load_report(*o, trust);
    if (bundle && bundle->with_data) check_bundle_places(*bundle, original);
    if (bundle) check_bundle_catalog(o->catalog, original);
    if (!original.contains("manifest"))
      throw Error(ErrorKind::kVerification, "the report has no manifest: it cannot be reproduced");
    // Where the inputs are now (--root, --map): the config reads them there, and the
    // recorded manifest is read as if pinned there, so that only digests can drift.
    manifest::PathMap where;
    if (bundle && bundle->with_data) where = bundle->inputs;
    if (!o->root.empty()) {
      where.root = std::filesystem::absolute(o->root).lexically_normal().string();
      while (where.root.size() > 1 && where.root.back() == '/') where.root.pop_back();
      if (!is_valid_utf8(where.root) || where.root.find_first_of("*?[") != std::string::npos)
        throw Error(ErrorKind::kUsage, "--root " + printable(where.root) + " is not UTF-8 or holds a glob character",
                    "move or link the inputs to a directory whose path is plain UTF-8");
    }
    for (const auto& m : o->map) where.prefixes.push_back(manifest::parse_prefix_mapping(m));
    const nlohmann::json old_manifest = manifest::remap_manifest(original["manifest"], where);
    config::Config cfg = manifest::config_from_manifest(old_manifest);  // mapped once, there
    if (!where.empty())
      note() << "reproduce: the config's directory "
             << printable(manifest::config_from_manifest(original["manifest"]).base_dir) << " is read at "
             << printable(cfg.base_dir) << "\n";
    if (!cfg.program.command.empty())
      throw Error(ErrorKind::kUsage,
                  "the report is a program pilot's (program.command): `anchor reproduce` does not re-run a program yet",
                  "check its inputs with `anchor pin --check <run dir>/manifest.json` and run `anchor pilot` on its "
                  "config again (docs/program.md, \"Limits of the supervisor side\")");
    // A pilot that started from a checkpoint (pilot.start_from: latest) would
    // start again from whatever is newest in checkpoint.dir now: not the same
    // run. The report's `start` and its config are both asked: either may say so.
    const auto start = original.value("start", nlohmann::json::object());
    if (start.value("from", "init") == "latest" || cfg.pilot.start_from == "latest")
      throw Error(ErrorKind::kConfig,
                  "the report's pilot started from a checkpoint" +
                      (start.contains("dir") && start["dir"].is_string() ? " (" + start["dir"].get<std::string>() + ")"
                                                                         : std::string()) +
                      " (pilot.start_from: latest): reproducing it is not supported",
                  "a re-run would start from the newest checkpoint in checkpoint.dir now, not that one; re-run `anchor "
                  "pilot --start-from latest` against a copy of that checkpoint instead (docs/pilot.md)");

    // Re-pin the current environment and inputs against the recorded manifest.
    manifest::PinOptions po;
    po.use_cache = o->use_cache;
    nlohmann::json new_manifest;
    try {
      new_manifest = manifest::pin(cfg, po);
    } catch (const Error& e) {
      // An input not where the run had it (a file, or a pattern that matches none): say how to point at where it is
      // now.
      const std::string what = e.what();
      const bool input = what.rfind("data.", 0) == 0 || what.rfind("model.", 0) == 0 ||
                         what.find("matches no file") != std::string::npos;
      if (!input || (e.kind() != ErrorKind::kIo && e.kind() != ErrorKind::kConfig)) throw;
      throw Error(e.kind(), what,
                  (e.hint().empty() ? std::string() : e.hint() + "; ") +
                      "the run's relative inputs are read from its config directory " + printable(cfg.base_dir) +
                      (where.empty() ? std::string(" (as recorded)") : std::string()) +
                      ": if the tree moved or this is another machine, pass --root DIR (the directory that now holds "
                      "what that one held) and --map OLD=NEW for absolute paths; what is found there must match the "
                      "recorded digests (docs/report.md, \"Reproducing a run elsewhere\")");
    }
    const auto drift = manifest::compare(old_manifest, new_manifest);
    if (drift.empty())
      note() << "reproduce: no drift: every pin matches the original run\n";
    else
      std::cerr << "reproduce: " << drift.size() << " pins drifted since the original run:\n"
                << manifest::format_drift_table(drift);
    if (!drift.empty() && !o->allow_drift)
      throw Error(ErrorKind::kVerification, "pins drifted; the re-run would not reproduce the same inputs",
                  "restore the inputs, or pass --allow-drift to re-run anyway and compare within tolerance");

    nlohmann::json drift_json = nlohmann::json::array();
    for (const auto& d : drift) drift_json.push_back({{"what", d.what}, {"old", d.old_value}, {"new", d.new_value}});
    pipeline::PilotOptions po2;
    po2.config = &cfg;
    po2.config_path = cfg.source_path;
    // Where the re-run writes: only what the command line names, else under the
    // current directory. The report's run.output_dir and checkpoint.dir are
    // another machine's paths, or whatever a hostile report wants cleaned
    // (stale temporaries are removed from the checkpoint directory) and
    // written; the effective config keeps them as recorded.
    po2.use_config_dirs = false;
    po2.run_dir = o->run_dir;                // empty: runs/<run-id>
    po2.checkpoint_dir = o->checkpoint_dir;  // empty: <run dir>/checkpoints
    if (!cfg.checkpoint.dir.empty())
      note() << "reproduce: the report's checkpoint.dir " << printable(cfg.checkpoint.dir)
             << " is not used; checkpoints go to "
             << (o->checkpoint_dir.empty() ? "<run dir>/checkpoints (--checkpoint-dir to choose)" : o->checkpoint_dir)
             << "\n";
    if (o->run_dir.empty() && cfg.run.output_dir != config::Config{}.run.output_dir)
      note() << "reproduce: the report's run.output_dir " << printable(cfg.run.output_dir)
             << " is not used; the run goes under " << config::Config{}.run.output_dir << "/ (--run-dir to choose)\n";
    // The report's signing key is a path a report chose: never read. The
    // command line's key signs the re-run, else the per-user key.
    po2.signing_key = o->signing_key;
    const std::string not_used =
        cfg.report.signing_key.empty() || cfg.report.signing_key == "none"
            ? std::string()
            : " (the report's report.signing_key " + printable(cfg.report.signing_key) + " is not used)";
    if (o->signing_key == "none")
      std::cerr << "reproduce: the re-run is unsigned (--signing-key none)\n";
    else if (o->signing_key.empty())
      note() << "reproduce: the re-run is signed with your per-user key" << not_used
             << "; --signing-key KEY to sign it with another\n";
    po2.baseline = &original;
    po2.pinned_manifest = &new_manifest;
    po2.use_hash_cache = o->use_cache;
    po2.json_stdout = o->json;
    po2.junit_path = o->junit;
    po2.log_level = global.log_level;
    // Bitwise where nothing drifted on the CPU; the recorded tolerance otherwise.
    po2.reproduce_bitwise = drift.empty() && cfg.device == "cpu";
    po2.reproduces = {{"report", std::filesystem::absolute(o->report).string()},
                      {"report_sha256", trust.sha256},
                      {"run_id", original.value("run_id", "")},
                      {"verified", trust.verified},
                      {"key", trust.key},
                      {"allow_drift", o->allow_drift},
                      {"inputs_at", where.to_json()},
                      {"drift", drift_json}};
    note() << "reproduce: comparing "
           << (po2.reproduce_bitwise ? std::string("bitwise (no drift, CPU)")
                                     : "within the recorded tolerance " + std::to_string(cfg.pilot.tolerance) +
                                           (drift.empty() ? " (GPU)" : " (pins drifted)"))
           << "\n";
    if (bundle) po2.reproduces["bundle"] = printable(bundle->dir);
    po2.catalog = o->catalog;
    po2.worker_binary = torch_binary();
    return cli::run_pilot(po2);
  };
  // What is read from the signed report is typed where it is read; a type
  // anchor never writes (a report signed by another hand) is a verification
  // failure, not an internal error.
  Runner checked = [body]() {
    try {
      return body();
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorKind::kVerification,
                  std::string("a field of the report has a type anchor does not write (") + e.what() + ")",
                  "the report was not written by anchor's pilot, or was changed and signed again: reproduce a run "
                  "anchor signed (if it is one, this is a bug: report it)");
    }
  };
  return [o, checked]() { return writing_junit_on_refusal(o->junit, checked); };
}

}  // namespace anchor::cli
