// anchor reproduce REPORT: verify a past run's report, re-pin and show the
// drift, re-run the pilot with the recorded effective config and seeds in a
// new run directory, and compare the results stage by stage. The command
// line maps onto pipeline::reproduce, which does all of that.
#include <memory>

#include "anchor/pilot/pilot.hpp"
#include "anchor/reproduce/reproduce.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

void add_reproduce_options(CLI::App& sub, reproduce::ReproduceOptions& o) {
  sub.add_option("report", o.report,
                 "report.intoto.json of a past run (or report.json with --allow-unsigned), or a bundle directory "
                 "(`anchor bundle`)")
      ->type_name("PATH")
      ->required();
  sub.add_option("--key", o.key,
                 "the signer's public key (SPKI PEM) to verify with (default: report.pub beside the report, which "
                 "shows integrity, not who signed: warned and recorded as such in reproduces.key)")
      ->type_name("FILE");
  sub.add_option("--run-dir", o.run_dir,
                 "run directory for the re-run (default: runs/<new run-id> in the current directory; the report's "
                 "run.output_dir is not used)")
      ->type_name("DIR");
  sub.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "directory the re-run saves its checkpoints in (default: <run dir>/checkpoints; the report's "
                 "checkpoint.dir is not used). Stale temporaries in it are removed; it must hold no step-* directory")
      ->type_name("DIR");
  sub.add_option("--signing-key", o.signing_key,
                 "PKCS#8 PEM private key that signs the re-run's report; default: your per-user key (made on first "
                 "use, as a pilot's); none: the re-run is unsigned. The report's report.signing_key is not used")
      ->type_name("FILE");
  sub.add_option("--root", o.root,
                 "the directory that now holds what the run's config directory held (its relative inputs)")
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  sub.add_option("--map", o.map, "OLD=NEW: a recorded absolute path prefix and where it is now (repeatable)")
      ->type_name("OLD=NEW")
      ->type_name("OLD=NEW");
  sub.add_flag("--allow-drift", o.allow_drift, "re-run even when pins drifted (the new report says so)");
  sub.add_flag("--allow-unsigned", o.allow_unsigned, "accept an unsigned report.json (loudly unverified)");
  sub.add_flag_callback(
      "--no-cache", [&o] { o.use_cache = false; }, "hash every input again instead of trusting the pin cache");
  sub.add_flag("--json", o.json, "print the new report.json on stdout");
  sub.add_option("--junit", o.junit, "also write a JUnit XML file for the re-run")->type_name("FILE");
}

}  // namespace

Runner setup_reproduce(CLI::App& sub, const GlobalOptions& global) {
  auto o = std::make_shared<reproduce::ReproduceOptions>();
  add_reproduce_options(sub, *o);
  Runner body = [o, &global]() {
    // The fresh pin must see the libraries of a process that trains.
    if (!torch_in_process()) hand_over_to_torch("reproduce pins the libraries LibTorch loads");
    reproduce::ReproduceOptions opts = *o;
    opts.log_level = global.log_level;
    opts.worker_binary = torch_binary();
    opts.run_pilot = cli::run_pilot;  // the supervisor here, or the launched protocol around it
    return reproduce::run(opts);
  };
  return [o, body]() { return writing_junit_on_refusal(o->junit, body); };
}

}  // namespace anchor::cli
