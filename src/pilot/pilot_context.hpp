#pragma once
// The context both of the supervisor's drivers work on: run_supervisor (the
// built-in trainer's workers, supervisor.cpp) and run_program_pilot (the
// user's own program as the worker, program_pilot.cpp). How a pilot ends is
// outcome.hpp; the signal flag is signals.hpp. Internal to pilot.
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/verified_dir.hpp"
#include "anchor/common/dir_lock.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/plan/catalog.hpp"
#include "anchor/protocol/events.hpp"
#include "anchor/run_report/report_writer.hpp"

namespace anchor::run_report {
struct Profile;
}  // namespace anchor::run_report

namespace anchor::pilot {

// events.jsonl: one line per event, appended and flushed as it happens. A
// reused run directory's is begun again: it is this run's account only (its
// trace.json and signed subjects are; an earlier run's report is replaced too).
class EventLog {
 public:
  explicit EventLog(const std::string& path) : out_(path, std::ios::trunc) {
    if (!out_) throw io_error("open", path, errno);
  }
  void write(nlohmann::json e, const std::string& source) {
    if (!e.contains("time")) e["time"] = protocol::unix_now();  // as the workers' lines: one type per key
    e["source"] = source;
    out_ << dump_json(e) << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

struct Pilot {
  config::Config cfg;
  PilotOptions opts;
  std::string run_id, run_dir, ckpt_dir;
  std::string copy_to;              // export.copy_to resolved; empty: no copy_off (always, under reproduce)
  fs::DirLock run_lock, ckpt_lock;  // held for the pilot's life: one pilot per directory
  std::unique_ptr<EventLog> events;
  run_report::Report report;
  std::string signing_key;      // resolved path; empty: the run is unsigned
  std::string unsigned_reason;  // why signing_key is empty ("report.signing_key is none")
  // Checkpoint directories a worker's restore verified completely: the report's
  // list and the signing count them verified while they still match, instead of
  // reading them again (checkpoint::VerifiedDir).
  std::vector<checkpoint::VerifiedDir> seen_checkpoints;
  plan::Catalog catalog;
  std::string catalog_problem;  // a program pilot's catalog that did not load: its plan says so
  int nproc = 1;                // ranks of the reference and resume workers (distributed.nproc_per_node)
  bool launched = false;        // torchrun or srun placed the ranks (run_supervisor's launched_world)
  std::string worker_binary;    // anchor-torch (or this binary when it has LibTorch)
  // The stages this pilot runs, in order: the JUnit file lists those it did not reach as skipped.
  std::vector<std::string> planned_stages;

  // Supervisor-side stage: timed, logged, recorded in the report. The body
  // returns the stage's figures; figures holding "failed" (why, a string)
  // record the stage as failed with that error: it ran, and its answer is no
  // (compare on a resume mismatch).
  template <typename F>
  void stage(const std::string& name, F&& body) {
    events->write({{"stage", name}, {"event", "start"}}, "supervisor");
    auto t0 = std::chrono::steady_clock::now();
    nlohmann::json figures = body();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json record = {{"stage", name}, {"status", "passed"}, {"seconds", s}};
    if (figures.is_object() && figures.contains("failed")) {
      record["status"] = "failed";
      record["error"] = figures["failed"];
      figures.erase("failed");
    }
    record["figures"] = std::move(figures);
    report.add_stage(record);
    events->write({{"stage", name}, {"event", "end"}, {"status", record["status"]}, {"seconds", s}}, "supervisor");
  }
};

// The stages both drivers run first, before any worker: the preflight
// (pilot.preflight_mib > 0) and the pipeline (budget.download_command or
// preprocess_command), each added to p.planned_stages first (a pilot that
// stops in the one still lists the other, not reached). nullopt when both
// passed, else the pilot's exit code (its report published).
std::optional<ExitCode> node_stages(Pilot& p);

// The pilot's first stage (pilot.preflight_mib > 0; docs/pilot.md, "Preflight"):
// the node measured (preflight.hpp) into report.json's node, the stage's
// figures a line of it. A node that fails its health check, or whose disk or
// all-reduce fails, fails the stage, named, before any worker starts (the
// report published, the exit code returned). Where torchrun or srun placed
// the ranks (p.launched, several nodes), the all-reduce is left to them.
std::optional<ExitCode> preflight_stage(Pilot& p);

// The pipeline stage (budget.download_command, budget.preprocess_command;
// pipeline_timing.hpp): each command timed on its sample under
// <run dir>/pipeline, into report.json's pipeline. A command that fails fails
// the stage with its output's last lines.
std::optional<ExitCode> pipeline_stage(Pilot& p);

// The start point against what checkpoint.dir holds: "" when fine, else why
// not, with what to do (pilot.start_from init needs no step directory there).
std::string check_start_dir(const config::Config& cfg, const std::string& ckpt_dir);

// A stage's figures.profile, given its trace in the run directory ("file":
// "profile.json"): the operators and kernels with the most self time added as
// "top" and "self_s" (docs/report.md, "profile.json"); what kept them out as
// "error". Both drivers' worker B profiles its last step.
void add_top_operators(const std::string& run_dir, run_report::Profile& profile);

}  // namespace anchor::pilot
