#pragma once
// How a pilot ends, the same for both drivers: every outcome publishes the
// report (report.json, report.md, signed when a key is configured; the JUnit
// file; --json) and returns the process exit code. Internal to pilot.
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "anchor/protocol/compare.hpp"
#include "pilot_context.hpp"

namespace anchor::pilot {

// An error's message with its hint, as a failed stage's report says it: "what (hint: how)".
std::string with_hint(const Error& e);

// The readable stage table: stdout, or stderr when --json reserves stdout for the report.
std::ostream& summary_stream(const Pilot& p);
// Writes every output of the run, whatever its outcome: report.json and
// report.md (signed when a key is configured), the JUnit XML, --json.
void publish(Pilot& p, bool print_json = true);  // print_json: --json's report on stdout
// ANCHOR_SIGNAL_FAULT=sigint_at_plan: the supervisor raises SIGINT on itself (its plan stage's start).
void signal_fault_at_plan();
// The pilot passed (its outcome set): the report published, the plan's
// summary and the stage table printed; returns 0.
ExitCode passed(Pilot& p);
// Under `anchor reproduce` (PilotOptions::baseline): the reproduce_compare
// stage, the re-run compared figure by figure with the report it reproduces
// (bitwise when PilotOptions::reproduce_bitwise). nullopt when there is no
// baseline or nothing differs; else the report published and exit 3.
std::optional<ExitCode> compare_with_baseline(Pilot& p);
// The pilot interrupted by SIGINT/SIGTERM: the report says so; returns 130/143.
ExitCode interrupted_exit(Pilot& p);
// A failed stage: recorded, the report published, the error printed; returns `code`.
ExitCode fail(Pilot& p, const std::string& stage, ExitCode code, const std::string& why);

// The compare stage's figures from the verdict over every rank: verdict,
// mode, cause, world_size, per_rank; "failed" (what diverged) on a mismatch.
nlohmann::json compare_stage_figures(const protocol::RankVerdicts& verdict, int nproc);

// The resume does not match: the report says what diverged (the cause),
// the error names it, with the failed checks (the first 10) when list_checks, and what the
// determinism control found when it ran (`control`, its words); returns 3.
ExitCode resume_mismatch(Pilot& p, const protocol::RankVerdicts& verdict, bool list_checks,
                         const std::string& control = "");

}  // namespace anchor::pilot
