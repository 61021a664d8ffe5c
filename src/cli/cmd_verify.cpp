// anchor verify REPORT [--key PUB] [--envelope-only] [--strict] [--json]
//
// Exit 0 when every check holds, 3 with each failure named, 2 on usage.
// Results go to stdout: one line per check that held, one per failure; or
// with --json one object (docs/report.md, "Verifying").
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/statement.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct VerifyCliOptions {
  std::string report;
  std::string key;
  bool envelope_only = false;
  bool json = false;
  bool strict = false;
};

}  // namespace

Runner setup_verify(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<VerifyCliOptions>();
  sub.add_option("report", o->report, "the signed report (runs/<id>/report.intoto.json) or its run directory")
      ->type_name("PATH")
      ->required();
  with_env(sub.add_option("--key", o->key,
                          "the signer's SPKI PEM public key; default: report.pub beside the "
                          "report (integrity only, says so)")
               ->type_name("FILE"),
           "ANCHOR_PUBLIC_KEY");
  sub.add_flag("--envelope-only", o->envelope_only,
               "check signature and statement only, not the files of the run directory "
               "(for an envelope copied away from its run; default: check them)");
  sub.add_flag("--strict", o->strict,
               "fail (exit 3) on a warning too: an unsigned file added, a retired checkpoint, a sidecar "
               "missing, no --key (integrity only)");
  sub.add_flag("--json", o->json,
               "print the result as one JSON object on stdout: report, verified, key_id, checks, warnings, "
               "failures");
  sub.footer(
      "Exit codes: 0 every check holds, 3 verification failed (each failure named; with --strict, also any "
      "warning), 2 usage. Checks: docs/report.md.");

  return [o]() {
    report::VerifyOptions opts;
    opts.public_key_path = o->key;
    opts.check_files = !o->envelope_only;
    report::VerifyResult r = report::verify_envelope(o->report, opts);
    const bool strict_failed = r.ok && o->strict && !r.warnings.empty();
    if (o->json) {
      const nlohmann::json out = {{"report", printable(o->report)},
                                  {"verified", r.ok && !strict_failed},
                                  {"strict", o->strict},
                                  {"key_id", r.key_id},
                                  {"checks", r.checks},
                                  {"warnings", r.warnings},
                                  {"retired", r.retired},
                                  {"failures", r.failures}};
      std::cout << dump_json(out, 2) << std::endl;
      return r.ok && !strict_failed ? ExitCode::kOk : ExitCode::kVerification;
    }
    for (const auto& c : r.checks) std::cout << "ok    " << for_terminal(c) << "\n";
    for (const auto& w : r.warnings) std::cout << "warn  " << for_terminal(w) << "\n";
    for (const auto& f : r.failures) std::cout << "FAIL  " << for_terminal(f) << "\n";
    if (strict_failed) {
      std::cout << for_terminal(o->report) << ": verification FAILED under --strict (" << r.warnings.size()
                << " warning" << (r.warnings.size() == 1 ? "" : "s") << ", no failure)\n";
      return ExitCode::kVerification;
    }
    if (r.ok) {
      std::cout << for_terminal(o->report) << ": verified (key " << for_terminal(r.key_id) << ")\n";
      return ExitCode::kOk;
    }
    std::cout << for_terminal(o->report) << ": verification FAILED (" << r.failures.size() << " problem"
              << (r.failures.size() == 1 ? "" : "s") << ")\n";
    return ExitCode::kVerification;
  };
}

}  // namespace anchor::cli
