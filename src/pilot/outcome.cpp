// How a pilot ends, for both drivers (supervisor.cpp, program_pilot.cpp):
// the report published whatever the outcome, and the exit code chosen.
#include "outcome.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "anchor/common/faults.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/report/keys.hpp"
#include "anchor/report/statement.hpp"
#include "anchor/run_report/compare_reports.hpp"
#include "signals.hpp"

namespace anchor::pilot {

std::string with_hint(const Error& e) {
  return std::string(e.what()) + (e.hint().empty() ? "" : " (hint: " + e.hint() + ")");
}

// The readable stage table goes to stdout, unless --json reserves stdout for the report.
std::ostream& summary_stream(const Pilot& p) { return p.opts.json_stdout ? std::cerr : std::cout; }

namespace {
std::atomic<bool> g_junit_published{false};

void write_junit(const Pilot& p) {
  if (p.opts.junit_path.empty()) return;
  fs::atomic_write_file(p.opts.junit_path, run_report::junit_xml(p.report.typed(), p.planned_stages));
  g_junit_published = true;
}
}  // namespace

bool junit_published() { return g_junit_published; }

// Writes every output of the run, whatever its outcome: report.json and
// report.md, the JUnit XML (--junit) and the report on stdout (--json).
namespace {
// ANCHOR_SIGNAL_FAULT's point `point`, when set: the supervisor raises that signal on itself there.
void signal_fault(const char* point, int sig) {
  for (const auto& item : faults::read("ANCHOR_SIGNAL_FAULT"))
    if (item.point == point) ::raise(sig);
}
}  // namespace

void signal_fault_at_plan() { signal_fault("sigint_at_plan", SIGINT); }

void publish(Pilot& p, bool print_json) {
  if (p.signing_key.empty()) {
    p.report.set_unsigned(p.unsigned_reason);
    p.report.write(p.run_dir);
    ANCHOR_LOG_WARN("report", "UNSIGNED: {}; {}/report.json is not signed and `anchor verify` will refuse it",
                    p.unsigned_reason, p.run_dir);
  } else {
    try {
      // report.json says it is signed and by which key before it becomes a subject of the signature.
      p.report.set_signed(report::key_id(report::load_private_key(p.signing_key, report::resolve_passphrase(""))));
      p.report.write(p.run_dir);
      report::SignOptions how;
      how.seen_checkpoints = p.seen_checkpoints;
      report::sign_run(p.run_dir, p.signing_key, how);  // it logs the envelope, the key id and the subjects
    } catch (const Error& e) {
      // The pilot fails with this error: its report and JUnit file say so too.
      const std::string why = std::string("signing failed: ") + e.what();
      p.report.set_unsigned(why);
      if (p.report.typed().status == "passed") p.report.set_outcome("failed", exit_code_for(e.kind()), why);
      p.report.write(p.run_dir);
      write_junit(p);
      throw;
    }
  }
  write_junit(p);
  if (print_json && p.opts.json_stdout) std::cout << dump_json(p.report.json(), 2) << std::endl;
}

ExitCode passed(Pilot& p) {
  // A SIGINT or SIGTERM in the last stages (the plan), or while the report is written and signed,
  // is an interrupted pilot (130/143, its report rewritten so), never a pass that exits 0.
  if (interrupt_signal()) return interrupted_exit(p);
  publish(p, false);
  signal_fault("sigterm_after_signing", SIGTERM);
  if (interrupt_signal()) return interrupted_exit(p);
  if (p.opts.json_stdout) std::cout << dump_json(p.report.json(), 2) << std::endl;
  const run_report::RunReport report = p.report.typed();
  if (report.plan) summary_stream(p) << plan::format_plan_summary(*report.plan, printable(p.run_dir)) << "\n";
  p.report.print_summary(summary_stream(p));
  if (report.reproduction)  // `anchor reproduce`: its verdict, last
    summary_stream(p) << "  reproduced: the re-run matches "
                      << printable(report.reproduces ? report.reproduces->report.value_or("") : "") << " ("
                      << report.reproduction->mode.value_or("") << ")\n";
  return ExitCode::kOk;
}

ExitCode interrupted_exit(Pilot& p) {
  const int sig = static_cast<int>(interrupt_signal());
  p.events->write({{"event", "interrupted"}, {"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}}, "supervisor");
  const ExitCode code = sig == SIGINT ? ExitCode::kInterrupted : ExitCode::kTerminated;
  p.report.set_outcome(
      "interrupted", code,
      "interrupted by " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + "; only committed checkpoints are kept");
  publish(p);
  ANCHOR_LOG_WARN("pilot", "interrupted; report written to {}/report.json", p.run_dir);
  return code;
}

ExitCode fail(Pilot& p, const std::string& stage, ExitCode code, const std::string& why) {
  p.report.add_stage({{"stage", stage}, {"status", "failed"}, {"error", why}});
  p.events->write({{"stage", stage}, {"event", "end"}, {"status", "failed"}, {"error", why}}, "supervisor");
  p.report.set_outcome("failed", code, stage + ": " + why);
  try {
    publish(p);
  } catch (const Error& e) {
    // The failure being reported stays the error; the report's own is said too.
    std::fprintf(stderr, "anchor: error: the report of the failed pilot could not be written: %s\n", e.what());
  }
  p.report.print_summary(summary_stream(p));
  std::fprintf(stderr, "anchor: error: pilot failed in stage %s: %s\n", stage.c_str(), capped(why).c_str());
  return code;
}

namespace {
// "optimizer, rank 1: rng": what diverged, as the report and stderr say it.
std::string causes(const protocol::RankVerdicts& verdict) {
  std::string out;
  for (const auto& c : verdict.combined.cause) out += (out.empty() ? "" : ", ") + c;
  return out;
}
}  // namespace

nlohmann::json compare_stage_figures(const protocol::RankVerdicts& verdict, int nproc) {
  nlohmann::json f = {{"verdict", verdict.match() ? "match" : "mismatch"},
                      {"mode", verdict.combined.mode},
                      {"cause", verdict.combined.cause},
                      {"world_size", nproc},
                      {"per_rank", verdict.per_rank_json()}};
  if (!verdict.match()) f["failed"] = "resume does not match the uninterrupted run: " + causes(verdict) + " diverged";
  return f;
}

ExitCode resume_mismatch(Pilot& p, const protocol::RankVerdicts& verdict, bool list_checks,
                         const std::string& control) {
  const std::string cause = causes(verdict);
  p.report.set_outcome(
      "failed", ExitCode::kVerification,
      "resume does not match the uninterrupted run: " + cause + " diverged" + (control.empty() ? "" : ". " + control));
  publish(p);
  p.report.print_summary(summary_stream(p));
  std::fprintf(stderr, "anchor: error: resume mismatch: %s diverged\n", cause.c_str());
  if (list_checks) {  // the first that failed, in order: what follows from the first is seldom news
    constexpr std::size_t kShown = 10;
    std::size_t failed = 0;
    for (const auto& c : verdict.combined.checks)
      if (!c.ok && ++failed <= kShown)
        std::fprintf(stderr, "  %s: %s\n", capped(c.name).c_str(), capped(c.detail).c_str());
    if (failed > kShown) std::fprintf(stderr, "  ... and %zu more failed checks\n", failed - kShown);
  }
  if (!control.empty()) std::fprintf(stderr, "  determinism control: %s\n", control.c_str());
  std::fprintf(stderr, "hint: see the checks in %s/report.json (resume.checks)\n", p.run_dir.c_str());
  return ExitCode::kVerification;
}

// `anchor reproduce`'s last stage, for both drivers: the re-run against the
// report it reproduces (run_report::compare_reports).
std::optional<ExitCode> compare_with_baseline(Pilot& p) {
  const PilotOptions& opts = p.opts;
  if (!opts.baseline) return std::nullopt;
  run_report::Reproduction repro;
  std::vector<run_report::Check> differ;  // the figures that differ, for the stage and the last line
  std::string differing;                  // the first five named, then how many more
  p.stage("reproduce_compare", [&] {
    repro =
        run_report::compare_reports(*opts.baseline, p.report.typed(), opts.reproduce_bitwise, p.cfg.pilot.tolerance);
    for (const auto& c : *repro.checks)
      if (!c.ok.value_or(false)) differ.push_back(c);
    for (std::size_t i = 0; i < differ.size() && i < 5; ++i)
      differing += (differing.empty() ? "" : ", ") + differ[i].name.value_or("");
    if (differ.size() > 5) differing += " and " + std::to_string(differ.size() - 5) + " more";
    nlohmann::json f = {{"verdict", *repro.verdict}, {"mode", *repro.mode}, {"differences", *repro.differences}};
    if (!differ.empty()) f["failed"] = "the re-run differs from the report it reproduces: " + differing;
    return f;
  });
  // With the checkpoint_dir added above.
  p.report.set_reproduction(p.report.json().at("reproduces"), run_report::section_to_json(repro));
  if (differ.empty()) return std::nullopt;
  p.report.set_outcome("failed", ExitCode::kVerification,
                       "not reproduced: the re-run differs from the report it reproduces (" +
                           std::to_string(*repro.differences) + " differences, " + *repro.mode + ")");
  publish(p);
  for (const auto& c : differ)
    std::fprintf(stderr, "  differs: %s: %s\n", c.name.value_or("").c_str(), c.detail.value_or("").c_str());
  p.report.print_summary(summary_stream(p));  // its last line: not reproduced, and how many differ
  summary_stream(p) << "  not reproduced: " << differing << (differ.size() == 1 ? " differs" : " differ") << "\n";
  return ExitCode::kVerification;
}

}  // namespace anchor::pilot
