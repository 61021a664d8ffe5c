#pragma once
// Assembles report.json (format anchor.report/v1, docs/report.md), the human
// summary report.md, the stdout/stderr stage table and the JUnit XML.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/protocol/worker_result.hpp"
#include "anchor/run_report/run_report.hpp"

namespace anchor::run_report {

// report.json's steps.numbered_from: every step is numbered from 1, the built-in's and a program's.
inline constexpr std::int64_t kStepsNumberedFrom = 1;

class Report {
 public:
  void begin(const std::string& run_id, const config::Config& cfg, const std::string& config_path);
  void set_manifest(const nlohmann::json& manifest);
  void add_stage(const nlohmann::json& stage);
  // steps, eval, resume (the verdict and the state digests), loss_scaler and
  // measurements, from worker A's and worker B's results.
  void set_resume(const protocol::WorkerResult& reference, const protocol::WorkerResult& resume,
                  const nlohmann::json& verdict);
  void set_memory_points(const nlohmann::json& points);
  // measurements.activation_checkpointing: both sides of the trade (activation_probe.hpp).
  void set_activation_checkpointing(const nlohmann::json& figures);
  void set_plan(const nlohmann::json& plan) { j_["plan"] = plan; }
  // A top-level section as the caller built it (the program pilot's program,
  // resume, steps, measurements; docs/report.md).
  void set_section(const std::string& key, nlohmann::json value) { j_[key] = std::move(value); }
  // The numerical validation of train.precision (worker A's precision stage; docs/precision.md).
  // The training steps of a worker A that failed after them (steps.train; set_resume sets all three
  // parts), and the peak memory of each stage added so far (measurements.memory.stages).
  void set_train_steps(const nlohmann::json& steps);
  void set_precision(const nlohmann::json& validation);
  // Several ranks: strategy, per-rank state bytes vs DDP's and comm time, RNG resharding (docs/report.md).
  void set_distributed(const nlohmann::json& d) { j_["distributed"] = d; }
  // Where worker A started: {"from": "init"} or the checkpoint it restored
  // (step, dir, manifest_sha256, run_id, ...; docs/report.md).
  void set_start(const nlohmann::json& s) { j_["start"] = s; }
  // Lists the checkpoints under ckpt_dir that the store verifies completely, with
  // their manifest digests (paths relative to run_dir), oldest first; step
  // directories that fail verification go to "unverified_checkpoints" with their
  // problems. Reads every checkpoint once, but one that `seen` still matches
  // (worker B's restore verified it, and nothing in it changed since:
  // checkpoint::VerifiedDir) not at all.
  void add_checkpoints(const std::string& ckpt_dir, const std::string& run_dir,
                       const std::vector<checkpoint::VerifiedDir>& seen = {});
  void set_outcome(const std::string& status, ExitCode exit_code, const std::string& message);
  void set_signed(const std::string& key_id);
  // `reproduces` alone (the report reproduced, the key trusted), from the
  // start: a re-run that fails still says what it reproduced.
  void set_reproduces(const nlohmann::json& reproduces) { j_["reproduces"] = reproduces; }
  void set_reproduction(const nlohmann::json& reproduces, const nlohmann::json& result);
  void set_unsigned(const std::string& why);

  // Writes report.json and report.md into run_dir (atomically).
  void write(const std::string& run_dir) const;
  void print_summary(std::ostream& os) const;
  const nlohmann::json& json() const { return j_; }
  // The report so far as the typed document every view reads.
  RunReport typed() const { return RunReport::from_json(j_); }

 private:
  nlohmann::json j_ = nlohmann::json::object();
  // The config's shape, for measurements.step and .memory (begin).
  int micro_batch_ = 0, grad_accum_ = 0;
  std::string precision_;
};

namespace detail {
// report.md's "Measurements" and "Environment" sections (markdown), which
// report.html shows too, and a byte count as report.md writes it ("n/a" for
// what is negative or not a number).
void measurements_md(std::ostream& md, const RunReport& report);
void environment_md(std::ostream& md, const RunReport& report);
std::string bytes_text(double bytes);
// The stages measurements.memory.stages holds, in the order the stages ran,
// then those the stage list lacks (report.md's table, report.html's chart).
std::vector<std::string> memory_stage_order(const RunReport& report);
// Text for XML or HTML content and attribute values (the JUnit file's
// escaping): bytes that are not UTF-8 as \xNN, control characters as \xNN or
// character references, and & < > " ' escaped.
std::string markup_escape(const std::string& raw);
}  // namespace detail

// JUnit XML (docs/pilot.md, --junit; README, "Use it in CI"), valid against Jenkins' xunit schema
// (junit-10.xsd): one test case per stage and per resume check; a stage in
// `planned` that the report does not hold is <skipped/>, saying where the
// pilot stopped.
std::string junit_xml(const RunReport& report, const std::vector<std::string>& planned = {});
// The JUnit XML of a pilot refused before it had a report: one failed test
// case `name` whose failure has `type` and the message.
std::string junit_error_xml(const std::string& name, const std::string& type, const std::string& message,
                            const std::string& timestamp);

}  // namespace anchor::run_report
