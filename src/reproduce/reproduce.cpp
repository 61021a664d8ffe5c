// `anchor reproduce` in the library: verify a past run's report, re-pin and
// show the drift, re-run the pilot with the recorded effective config and
// seeds in a new run directory (reproduce), and compare the results stage by
// stage (run_report::compare_reports, the supervisor's reproduce_compare stage).
#include "anchor/reproduce/reproduce.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/manifest/path_map.hpp"
#include "anchor/reproduce/bundle.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/statement.hpp"

namespace anchor::reproduce {
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

// How the report was checked, for the reproduction's `reproduces`.
struct Trust {
  bool verified = false;
  // {path, key_id, source}: the key the signature verified with and why it
  // was used; null for an unsigned report.json.
  nlohmann::json key;
  std::string sha256;  // of the bytes checked and used (one read)
};

// What a reproduction learns on its way, step by step (reproduce below). The
// re-run's PilotOptions point into it: it outlives the pilot.
struct Reproduction {
  explicit Reproduction(const ReproduceOptions& o) : opts(o), report(o.report) {}
  const ReproduceOptions& opts;
  // From a bundle (open_bundle): the envelope is checked alone (the run's
  // other files are not there), and the bundle's catalog plans.
  std::optional<OpenedBundle> bundle;
  std::string report;  // the file read: opts.report, or the bundle's envelope
  bool envelope_only = false;
  std::string catalog;
  Trust trust;
  run_report::RunReport original;      // the report reproduced
  run_report::RunReport baseline;      // what the re-run compares with: original, its program's paths mapped
  manifest::PathMap where;             // where its inputs are now (--root, --map, the bundle's)
  nlohmann::json old_manifest;         // its manifest, read as if pinned there
  config::Config cfg;                  // its effective config, mapped there
  nlohmann::json new_manifest;         // pinned here, now
  std::vector<manifest::Drift> drift;  // between the two
};

// What `reproduces.key.source` says for a key anchor did not get from the user.
constexpr const char* kKeyBesideReport = "report.pub beside the report (not independently trusted)";

// A bundle: every file it lists checked first; its envelope, key, catalog and inputs used.
void open_bundle_if_given(Reproduction& r) {
  if (!is_bundle(r.opts.report)) return;
  r.bundle = open_bundle(r.opts.report);
  if (r.bundle->with_data && (!r.opts.root.empty() || !r.opts.map.empty()))
    throw Error(ErrorKind::kUsage,
                "the bundle " + printable(r.bundle->dir) + " carries the run's inputs: --root and --map do not apply",
                "drop them; they are for a bundle made without --with-data, or a report");
  note() << "reproduce: the bundle " << for_terminal(r.bundle->dir) << " holds every file it lists, by digest\n";
  r.report = r.bundle->envelope;
  r.envelope_only = true;
  r.catalog = r.bundle->catalog;
}

// The report inside the envelope r.report, which must verify.
nlohmann::json verified_report(Reproduction& r) {
  report::VerifyOptions vo;
  vo.public_key_path = r.opts.key;
  vo.check_files = !r.envelope_only;
  auto v = report::verify_envelope(r.report, vo);
  // As `anchor verify` prints them: without --key, that the key came with
  // the run and proves integrity, not who signed it.
  for (const auto& w : v.warnings) std::cerr << "reproduce: warn  " << w << "\n";
  if (!v.ok) {
    std::string all;
    for (const auto& f : v.failures) all += "\n  " + f;
    throw Error(ErrorKind::kVerification, "the report does not verify:" + all,
                "a report that fails `anchor verify` cannot be reproduced faithfully");
  }
  Trust& trust = r.trust;
  trust.verified = true;
  trust.key = {{"path", std::filesystem::absolute(v.public_key_path).lexically_normal().string()},
               {"key_id", v.key_id},
               {"source", r.opts.key.empty() ? kKeyBesideReport : "--key"}};
  note() << "reproduce: the report verifies with key " << v.key_id << " (" << trust.key["source"].get<std::string>()
         << ": " << trust.key["path"].get<std::string>() << ")\n";
  // The payload of the bytes verify read and checked, not of another read.
  trust.sha256 = sha256_hex(v.envelope_text);
  auto env = report::envelope_from_json(v.envelope_text);
  // A bundle's copies of the signed files are the signed bytes (bundle.json itself is not signed).
  if (r.bundle) check_signed_subjects(*r.bundle, v.envelope_text);
  return parse_json(env.payload).at("predicate").at("report");
}

// The report inside a verified envelope, or a plain report.json (unverified).
nlohmann::json load_report(Reproduction& r) {
  const std::string text = fs::read_file(r.report);
  nlohmann::json doc;
  try {
    doc = parse_json(text);
  } catch (const nlohmann::json::parse_error&) {
    doc = nlohmann::json(nlohmann::json::value_t::discarded);
  }
  if (doc.is_discarded())
    throw Error(ErrorKind::kUsage, printable(r.report) + " is not JSON: not a report",
                "give the pilot's report.intoto.json (or report.json with --allow-unsigned)");
  if (doc.contains("payloadType")) return verified_report(r);
  if (!r.opts.allow_unsigned)
    throw Error(ErrorKind::kVerification, r.report + " is an unsigned report.json: it cannot be verified",
                "reproduce from report.intoto.json, or pass --allow-unsigned to re-run it anyway");
  ANCHOR_LOG_WARN("reproduce", "UNVERIFIED: {} is unsigned; reproducing it proves nothing about who ran it", r.report);
  r.trust.verified = false;
  r.trust.key = nullptr;
  r.trust.sha256 = sha256_hex(text);
  return doc;
}

// The catalog a bundle carries is the one the run planned with: the signed
// report's plan records its digest. A report from before anchor recorded it
// gets a warning.
void check_bundle_catalog(const std::string& catalog, const run_report::RunReport& original) {
  const auto recorded = recorded_catalog(original);  // the rule `anchor bundle` copies by
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
void check_bundle_places(const OpenedBundle& b, const run_report::RunReport& original) {
  InputPlaces want;
  try {
    want = input_places(run_report::section_to_json(*original.manifest));
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

// Where the inputs are now (--root, --map): the config reads them there, and the
// recorded manifest is read as if pinned there, so that only digests can drift.
void locate_inputs(Reproduction& r) {
  if (r.bundle && r.bundle->with_data) r.where = r.bundle->inputs;
  if (!r.opts.root.empty()) {
    std::string& root = r.where.root;
    root = std::filesystem::absolute(r.opts.root).lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    if (!is_valid_utf8(root) || root.find_first_of("*?[") != std::string::npos)
      throw Error(ErrorKind::kUsage, "--root " + printable(root) + " is not UTF-8 or holds a glob character",
                  "move or link the inputs to a directory whose path is plain UTF-8");
  }
  for (const auto& m : r.opts.map) r.where.prefixes.push_back(manifest::parse_prefix_mapping(m));
  const nlohmann::json pinned = run_report::section_to_json(*r.original.manifest);
  r.old_manifest = manifest::remap_manifest(pinned, r.where);
  r.cfg = manifest::config_from_manifest(r.old_manifest);  // mapped once, there
  r.baseline = r.original;
  if (r.where.empty()) return;  // nothing moved: the recorded paths stand
  const std::string recorded_dir = manifest::config_from_manifest(pinned).base_dir;
  if (r.baseline.program && r.baseline.program->command) {  // the interpreter the run started, where it is now
    const auto m = manifest::with_root_prefix(r.where, recorded_dir);
    for (auto& arg : *r.baseline.program->command) arg = manifest::map_path(m, arg);
  }
  note() << "reproduce: the config's directory " << for_terminal(recorded_dir) << " is read at "
         << for_terminal(r.cfg.base_dir) << "\n";
}

// What a re-run cannot reproduce: a program pilot from a bundle (the
// program's files and environment are not in it), and a pilot that started
// from a checkpoint.
void refuse_unsupported(const Reproduction& r) {
  // A program re-runs from its sources, interpreter and packages where they
  // are now (--root, --map move the recorded paths; the digests must match).
  if (!r.cfg.program.command.empty() && r.bundle)
    throw Error(ErrorKind::kUsage,
                "the report is a program pilot's (program.command): `anchor reproduce` re-runs a program from its "
                "files where they are now, not from a bundle",
                "reproduce its report.intoto.json where the program is, with --root DIR (where its config's "
                "directory is now) and --map OLD=NEW for its interpreter and packages (docs/program.md, "
                "\"Reproducing a program's run\")");
  // A pilot that started from a checkpoint (pilot.start_from: latest) would
  // start again from whatever is newest in checkpoint.dir now: not the same
  // run. The report's `start` and its config are both asked: either may say so.
  const run_report::Start& start = r.original.start ? *r.original.start : run_report::Start{};
  if (start.from.value_or("init") == "latest" || r.cfg.pilot.start_from == "latest")
    throw Error(ErrorKind::kConfig,
                "the report's pilot started from a checkpoint" + (start.dir ? " (" + *start.dir + ")" : std::string()) +
                    " (pilot.start_from: latest): reproducing it is not supported",
                "a re-run would start from the newest checkpoint in checkpoint.dir now, not that one; re-run `anchor "
                "pilot --start-from latest` against a copy of that checkpoint instead (docs/pilot.md)");
}

// Re-pins the current environment and inputs (r.new_manifest). A program's:
// what it had loaded, its sources and packages, hashed again where they were
// (manifest::repin_program_manifest, as `anchor pin --check` does).
void repin(Reproduction& r) {
  manifest::PinOptions po;
  po.use_cache = r.opts.use_cache;
  if (!r.cfg.program.command.empty()) {
    r.new_manifest = manifest::repin_program_manifest("the report's manifest", r.old_manifest, r.cfg, po);
    return;
  }
  try {
    r.new_manifest = manifest::pin(r.cfg, po);
  } catch (const Error& e) {
    // An input not where the run had it (a file, or a pattern that matches none): say how to point at where it is
    // now.
    const std::string what = e.what();
    const bool input = what.rfind("data.", 0) == 0 || what.rfind("model.", 0) == 0 ||
                       what.find("matches no file") != std::string::npos;
    if (!input || (e.kind() != ErrorKind::kIo && e.kind() != ErrorKind::kConfig)) throw;
    throw Error(e.kind(), what,
                (e.hint().empty() ? std::string() : e.hint() + "; ") +
                    "the run's relative inputs are read from its config directory " + printable(r.cfg.base_dir) +
                    (r.where.empty() ? std::string(" (as recorded)") : std::string()) +
                    ": if the tree moved or this is another machine, pass --root DIR (the directory that now holds "
                    "what that one held) and --map OLD=NEW for absolute paths; what is found there must match the "
                    "recorded digests (docs/report.md, \"Reproducing a run elsewhere\")");
  }
}

// The drift against the recorded manifest, shown; refused unless --allow-drift.
void check_drift(Reproduction& r) {
  r.drift = manifest::compare(r.old_manifest, r.new_manifest);
  if (r.drift.empty())
    note() << "reproduce: no drift: every pin matches the original run\n";
  else
    std::cerr << "reproduce: " << r.drift.size() << " pins drifted since the original run:\n"
              << manifest::format_drift_table(r.drift);
  if (!r.drift.empty() && !r.opts.allow_drift)
    throw Error(ErrorKind::kVerification, "pins drifted; the re-run would not reproduce the same inputs",
                "restore the inputs, or pass --allow-drift to re-run anyway and compare within tolerance");
}

// Where the re-run writes: only what the command line names, else under the
// current directory. The report's run.output_dir and checkpoint.dir are
// another machine's paths, or whatever a hostile report wants cleaned
// (stale temporaries are removed from the checkpoint directory) and
// written; the effective config keeps them as recorded.
void note_unused_dirs(const Reproduction& r) {
  const config::Config& cfg = r.cfg;
  if (!cfg.checkpoint.dir.empty())
    note() << "reproduce: the report's checkpoint.dir " << for_terminal(cfg.checkpoint.dir)
           << " is not used; checkpoints go to "
           << (r.opts.checkpoint_dir.empty() ? "<run dir>/checkpoints (--checkpoint-dir to choose)"
                                             : r.opts.checkpoint_dir)
           << "\n";
  if (r.opts.run_dir.empty() && cfg.run.output_dir != config::Config{}.run.output_dir)
    note() << "reproduce: the report's run.output_dir " << for_terminal(cfg.run.output_dir)
           << " is not used; the run goes under " << config::Config{}.run.output_dir << "/ (--run-dir to choose)\n";
}

// The report's signing key is a path a report chose: never read. The
// command line's key signs the re-run, else the per-user key.
void note_signing_key(const Reproduction& r) {
  const std::string& key = r.opts.signing_key;
  const std::string not_used =
      r.cfg.report.signing_key.empty() || r.cfg.report.signing_key == "none"
          ? std::string()
          : " (the report's report.signing_key " + printable(r.cfg.report.signing_key) + " is not used)";
  if (key == "none")
    std::cerr << "reproduce: the re-run is unsigned (--signing-key none)\n";
  else if (key.empty())
    note() << "reproduce: the re-run is signed with your per-user key" << not_used
           << "; --signing-key KEY to sign it with another\n";
}

// The re-run's `reproduces`: the report it reproduces, how it was trusted,
// where its inputs were read and what drifted.
nlohmann::json reproduces_json(const Reproduction& r) {
  nlohmann::json drift_json = nlohmann::json::array();
  for (const auto& d : r.drift) drift_json.push_back({{"what", d.what}, {"old", d.old_value}, {"new", d.new_value}});
  return {{"report", std::filesystem::absolute(r.report).string()},
          {"report_sha256", r.trust.sha256},
          {"run_id", r.original.run_id.value_or("")},
          {"verified", r.trust.verified},
          {"key", r.trust.key},
          {"allow_drift", r.opts.allow_drift},
          {"inputs_at", r.where.to_json()},
          {"drift", drift_json}};
}

// The re-run's pilot: the recorded config, the fresh manifest, the report to
// compare with, and only the command line's directories and signing key.
pilot::PilotOptions rerun_options(const Reproduction& r) {
  pilot::PilotOptions po;
  po.config = &r.cfg;
  po.config_path = r.cfg.source_path;
  po.use_config_dirs = false;
  po.run_dir = r.opts.run_dir;                // empty: runs/<run-id>
  po.checkpoint_dir = r.opts.checkpoint_dir;  // empty: <run dir>/checkpoints
  note_unused_dirs(r);
  po.signing_key = r.opts.signing_key;
  note_signing_key(r);
  po.baseline = &r.baseline;
  po.pinned_manifest = &r.new_manifest;
  po.use_hash_cache = r.opts.use_cache;
  po.json_stdout = r.opts.json;
  po.junit_path = r.opts.junit;
  po.log_level = r.opts.log_level;
  // Bitwise where nothing drifted on the CPU; the recorded tolerance otherwise.
  po.reproduce_bitwise = r.drift.empty() && r.cfg.device == "cpu";
  po.reproduce_allow_drift = r.opts.allow_drift;
  po.reproduces = reproduces_json(r);
  note() << "reproduce: comparing "
         << (po.reproduce_bitwise ? std::string("bitwise (no drift, CPU)")
                                  : "within the recorded tolerance " + std::to_string(r.cfg.pilot.tolerance) +
                                        (r.drift.empty() ? " (GPU)" : " (pins drifted)"))
         << "\n";
  if (r.bundle) po.reproduces["bundle"] = printable(r.bundle->dir);
  po.catalog = r.catalog;
  po.worker_binary = r.opts.worker_binary;
  return po;
}

ExitCode reproduce_unchecked(const ReproduceOptions& opts) {
  Reproduction r(opts);
  open_bundle_if_given(r);
  r.original = run_report::RunReport::from_json(load_report(r));
  if (!r.original.manifest)
    throw Error(ErrorKind::kVerification, "the report has no manifest: it cannot be reproduced");
  if (r.bundle && r.bundle->with_data) check_bundle_places(*r.bundle, r.original);
  if (r.bundle) check_bundle_catalog(r.catalog, r.original);
  locate_inputs(r);
  refuse_unsupported(r);
  repin(r);
  check_drift(r);
  return opts.run_pilot(rerun_options(r));
}

}  // namespace

ExitCode run(const ReproduceOptions& opts) {
  // What is read from the signed report is typed where it is read; a type
  // anchor never writes (a report signed by another hand) is a verification
  // failure, not an internal error.
  try {
    return reproduce_unchecked(opts);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kVerification,
                std::string("a field of the report has a type anchor does not write (") + e.what() + ")",
                "the report was not written by anchor's pilot, or was changed and signed again: reproduce a run "
                "anchor signed (if it is one, this is a bug: report it)");
  }
}

}  // namespace anchor::reproduce
