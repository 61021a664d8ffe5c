#pragma once
// report.json as one typed document (format anchor.report/v1, docs/report.md):
// what the views of a run read (report.md, the stage table, the JUnit file,
// report.html, `anchor reproduce`'s comparison) read from these structs, never
// from the JSON by key.
//
// One reader and one writer, made from one list of fields per struct
// (run_report.cpp, through common/json_doc.hpp), and exact both ways: each
// struct keeps the keys it does not model in `keys`, as read, and a modelled
// key whose value has another type than the field's (an older report, a
// hand-edited one) stays there too, so that
//
//     to_json(RunReport::from_json(j)).dump() == j.dump()
//
// for every object j (tests/unit/run_report/test_run_report.cpp). A field the
// report lacks is std::nullopt, and a view shows it as "n/a" or leaves it out.
// Sections other modules own are kept as their JSON: the config
// (config::from_json) and the plan (plan::format_plan); of the manifest
// (docs/manifest.md) and a program pilot's `program` section, what the views
// and the plan read. No torch here.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/common/json_doc.hpp"

namespace anchor::run_report {

using Json = nlohmann::json;
template <class T>
using Opt = std::optional<T>;
// Every struct's base: the keys of its object it does not model, as read.
using json_doc::or_empty;
using json_doc::Rest;

// One stage's peak memory (measurements.memory.stages.<stage>, figures.memory); -1: not measured.
struct StageMemory : Rest {
  Opt<std::int64_t> peak_allocated_bytes, peak_reserved_bytes, peak_rss_bytes;
};

// figures.profile.top[]: an operator or kernel of the profiled step, by self time.
struct ProfileOp : Rest {
  Opt<std::string> name, device;
  Opt<double> self_s, total_s;
  Opt<std::int64_t> calls;
};

// figures.profile: the profile of one step (docs/report.md, "profile.json").
struct Profile : Rest {
  Opt<std::string> file, profiler, skipped, error;
  Opt<std::int64_t> events, micro_batch, seq_len, step;
  Opt<double> seconds, self_s;  // self_s: the self time of every operator and kernel in the trace
  Opt<std::vector<ProfileOp>> top;
};

// A stage's figures: which are present depends on the stage (docs/report.md, "stages").
struct StageFigures : Rest {
  Opt<std::string> precision, verdict, mode, attention, start_from;
  Opt<std::string> finding, why;  // determinism: what the control found, or why it did not run
  Opt<Json> max_relative;         // determinism: a number, or "inf"
  Opt<double> loss_rel_diff, grad_norm_rel_diff, loss, tokens_per_s, seconds, memory_saved_percent, time_added_percent,
      gb_per_s, model_build_s, load_state_s, state_digest_s, train_windows;
  Opt<std::int64_t> bytes, step, parameters, start_step, memory_saved_bytes;
  Opt<Json> torn_checkpoints, skipped;  // lists the stage table counts
  Opt<StageMemory> memory;
  Opt<Profile> profile;
};

struct Stage : Rest {
  Opt<std::string> stage, status, error;
  Opt<double> seconds;
  Opt<StageFigures> figures;
};

// One recorded step (steps.train, .reference, .resume; a program's .resumed).
struct StepRow : Rest {
  Opt<std::int64_t> step;
  Opt<double> loss, grad_norm, lr, loss_scale, data_wait_s, compute_s, comm_s;
  Opt<std::string> batch_digest;
};

struct Steps : Rest {
  Opt<std::vector<StepRow>> train, reference, resume, resumed;
  // 1: a step's number counts from 1 (step N ran after N-1 steps, checkpoint step-N holds the state
  // after it). Absent in reports from before 2026-12, whose built-in workers counted from 0.
  Opt<std::int64_t> numbered_from;
};

struct Eval : Rest {
  Opt<double> before_save, after_restore, perplexity;
};

// One check of a comparison: resume.checks, reproduction.checks.
struct Check : Rest {
  Opt<std::string> name, detail, component;
  Opt<bool> ok;
};

// resume.per_rank: each rank's verdict (protocol::RankVerdicts).
struct RankVerdict : Rest {
  Opt<std::int64_t> rank;
  Opt<std::string> verdict;
  Opt<std::vector<std::string>> cause;
};

// The digests of one state (resume.state_digests.<saved|restored|...>).
struct StateDigestGroups : Rest {
  Opt<std::string> model, optimizer, rng, scaler;
};

// resume: protocol::RankVerdicts::to_json() and what the pilot adds.
struct Resume : Rest {
  Opt<std::string> verdict, mode, state_digest_scheme;
  Opt<double> tolerance;
  Opt<std::vector<std::string>> cause, diverged;
  Opt<std::vector<Check>> checks;
  Opt<std::vector<RankVerdict>> per_rank;
  Opt<std::int64_t> saved_step, restored_step, last_step;
  Opt<std::map<std::string, StateDigestGroups>> state_digests;
};

struct SkippedScalerStep : Rest {
  Opt<std::string> part, nonfinite_grad;
  Opt<std::int64_t> step;
  Opt<double> loss_scale;
};

struct LossScaler : Rest {
  Opt<bool> enabled;
  Opt<double> saved_scale, restored_scale, final_scale;
  Opt<std::vector<SkippedScalerStep>> skipped_steps;
};

struct PrecisionFigure : Rest {
  Opt<double> fp32, value, rel_diff;
  Opt<bool> flagged;
};

struct PrecisionParameter : Rest {
  Opt<std::string> name;
  Opt<double> grad_norm_fp32, grad_norm, rel_diff, rel_error;
};

struct PrecisionParameters : Rest {
  Opt<std::vector<PrecisionParameter>> flagged, largest;
};

struct NonFinite : Rest {
  Opt<std::string> what, tensor;
};

// precision: the fp32-vs-low-precision validation (docs/precision.md).
struct Precision : Rest {
  Opt<std::string> precision, reference, verdict;
  Opt<std::int64_t> step;
  Opt<double> tolerance;
  Opt<std::vector<NonFinite>> non_finite;
  Opt<PrecisionFigure> loss, grad_norm;
  Opt<PrecisionParameters> parameters;
};

// How the RNG was restored onto another world size (distributed.rng_restore, start.rng_restore).
struct RngRestore : Rest {
  Opt<std::int64_t> saved_world_size, world_size;
  Opt<Json> rederived;
};

struct RankFigures : Rest {
  Opt<std::int64_t> rank, node, optimizer_bytes, optimizer_bytes_ddp, gradient_bytes, gradient_bytes_ddp;
  Opt<std::string> host;
  Opt<double> comm_s;
};

struct Distributed : Rest {
  Opt<std::string> strategy, backend;
  Opt<std::int64_t> world_size, nodes;
  Opt<std::vector<RankFigures>> per_rank;
  Opt<RngRestore> rng_restore;
};

struct SkippedCheckpoint : Rest {
  Opt<std::string> dir, reason;
};

struct ConfigDifference : Rest {
  Opt<std::string> key;
  Opt<Json> checkpoint, config;
  Opt<bool> refused;
};

// start: initialisation, or the checkpoint worker A restored (docs/report.md, "start").
struct Start : Rest {
  Opt<std::string> from, dir, manifest_sha256, run_id, strategy;
  Opt<std::int64_t> step, world_size;
  Opt<std::vector<SkippedCheckpoint>> skipped;
  Opt<std::vector<ConfigDifference>> config_differences;
  Opt<RngRestore> rng_restore;
};

// measurements.step: the measured step.
struct MeasuredStep : Rest {
  Opt<double> seconds, compute_s, data_wait_s, stall_percent, comm_s, tokens_per_s, tokens_per_s_all_ranks,
      mfu_estimate;
  Opt<std::int64_t> world_size, micro_batch, grad_accum, tokens;
};

struct StepMemory : Rest {
  Opt<std::int64_t> peak_allocated_bytes, peak_reserved_bytes, peak_rss_bytes;
};

struct StateBytes : Rest {
  Opt<std::int64_t> parameters, gradients, optimizer;
};

// measurements.memory.points[]: the step's peak at one shape (the plan's memory model).
struct MemoryPointFigures : Rest {
  Opt<double> micro_batch, seq_len, peak_allocated_bytes;
};

struct MemoryFigures : Rest {
  Opt<std::string> source, precision;
  Opt<std::int64_t> device_total_bytes;
  Opt<double> baseline_bytes;  // a program's bytes held before its first step
  Opt<StepMemory> step;
  Opt<StateBytes> state_bytes;
  Opt<std::map<std::string, StageMemory>> stages;
  Opt<std::vector<MemoryPointFigures>> points;
};

// measurements.model: the measured model (the built-in's, or the shape a program declared).
struct ModelFigures : Rest {
  Opt<double> parameters, n_layer, n_head, n_embd, vocab_size, seq_len, micro_batch, grad_accum, flops_per_token;
  Opt<std::string> flops_source, device;
};

// measurements.checkpoint_save, measurements.restore.
struct IoFigures : Rest {
  Opt<std::int64_t> bytes;
  Opt<double> seconds, gb_per_s, model_build_s, load_state_s, state_digest_s;
};

struct ActivationCheckpointing : Rest {
  Opt<std::string> trade;
};

struct Measurements : Rest {
  Opt<ModelFigures> model;
  Opt<MeasuredStep> step;
  Opt<MemoryFigures> memory;
  Opt<IoFigures> checkpoint_save, restore;
  Opt<ActivationCheckpointing> activation_checkpointing;
};

// node: the preflight's figures (pilot/preflight.hpp; docs/report.md, "node").
struct NodeRate : Rest {
  Opt<std::string> path, what, kind, skipped;
  Opt<double> bytes, seconds, mb_per_s, bytes_per_token, tokens_per_s;
  Opt<std::int64_t> files;
};

struct AllReduceSize : Rest {
  Opt<std::int64_t> bytes;
  Opt<double> seconds, algbw_gb_per_s, busbw_gb_per_s;
};

struct AllReduceFigures : Rest {
  Opt<std::string> backend, what, kind, skipped;
  Opt<std::int64_t> ranks;
  Opt<double> latency_us, busbw_gb_per_s;
  Opt<std::vector<AllReduceSize>> sizes;
};

struct GpuHealth : Rest {
  Opt<std::string> skipped, driver, xid_read, kind, not_used;
  Opt<std::vector<std::string>> failures, warnings, xid;
  Opt<Json> devices;
};

struct Node : Rest {
  Opt<std::string> host;
  Opt<NodeRate> checkpoint_dir, data;
  Opt<AllReduceFigures> all_reduce;
  Opt<GpuHealth> gpu_health;
};

// pipeline: the download and preprocess commands timed on a sample (pilot/pipeline_timing.hpp).
struct PipelineCommand : Rest {
  Opt<std::vector<std::string>> command;
  Opt<double> seconds, bytes, mb_per_s;
  Opt<std::string> log, what, kind;
};

struct PipelineFigures : Rest {
  Opt<PipelineCommand> download, preprocess;
};

// checkpoints[]: a checkpoint the store verified completely.
struct CheckpointEntry : Rest {
  Opt<std::string> dir, manifest_sha256;
  Opt<std::int64_t> step;
};

struct DriftRow : Rest {
  Opt<std::string> what;
  Opt<Json> old_value, new_value;  // "old", "new"
};

// reproduces: the report reproduced and what drifted since.
struct Reproduces : Rest {
  Opt<std::string> report;
  Opt<std::vector<DriftRow>> drift;
};

// reproduction: the re-run against the original (compare_reports).
struct Reproduction : Rest {
  Opt<std::string> verdict, mode;
  Opt<double> tolerance;
  Opt<std::int64_t> differences;
  Opt<std::vector<Check>> checks;
};

// The report's copy of manifest.json (docs/manifest.md): what report.md's
// "Environment" and the plan read of it; the rest as pinned.
struct OsRelease : Rest {
  Opt<std::string> pretty_name;
};
struct Dependencies : Rest {
  Opt<std::string> libtorch, cuda_runtime, cuda_driver, cudnn, nccl, hip_runtime, glibc;
  Opt<OsRelease> os;
};
struct DeviceEntry : Rest {
  Opt<std::string> name;
};
struct DeviceFacts : Rest {
  Opt<std::string> accelerator;
  Opt<std::int64_t> count;
  Opt<std::vector<DeviceEntry>> devices;
};
struct HostFacts : Rest {
  Opt<std::string> hostname, cpu_model;
  Opt<std::int64_t> cpu_count, memory_total_bytes;
};
struct BlasFacts : Rest {
  Opt<std::string> library;
  Opt<std::int64_t> threads;
};
struct ThreadFacts : Rest {
  Opt<std::int64_t> run_threads, intra_op, inter_op;
  Opt<BlasFacts> blas;
};
struct ContainerFacts : Rest {
  Opt<std::string> digest;
};
struct Manifest : Rest {
  Opt<Dependencies> dependencies;
  Opt<DeviceFacts> device;
  Opt<HostFacts> host;
  Opt<ThreadFacts> threads;
  Opt<ContainerFacts> container;
};

// program: a program pilot's (docs/program.md): what ran, and the versions it reported.
struct ProgramVersions : Rest {
  Opt<std::string> torch;
};
struct Program : Rest {
  Opt<std::vector<std::string>> command;  // as started: command[0] resolved to a path
  Opt<ProgramVersions> versions;
};

struct AnchorBuild : Rest {
  Opt<std::string> version, git_commit;
};

struct RunReport : Rest {
  Opt<std::string> format, run_id, created_at, finished_at, config_path, config_digest, device, status, message,
      signer_key_id, unsigned_reason, manifest_sha256;
  Opt<std::int64_t> exit_code;
  Opt<bool> is_signed;  // "signed"
  Opt<AnchorBuild> anchor;
  Opt<Json> config, plan, unverified_checkpoints;
  Opt<Manifest> manifest;
  Opt<Program> program;
  Opt<std::vector<Stage>> stages;
  Opt<Start> start;
  Opt<Resume> resume;
  Opt<Steps> steps;
  Opt<Eval> eval;
  Opt<LossScaler> loss_scaler;
  Opt<Precision> precision;
  Opt<Distributed> distributed;
  Opt<Node> node;
  Opt<PipelineFigures> pipeline;
  Opt<Measurements> measurements;
  Opt<std::vector<CheckpointEntry>> checkpoints;
  Opt<Reproduces> reproduces;
  Opt<Reproduction> reproduction;

  // Never throws: what is not an object reads as an empty report.
  static RunReport from_json(const Json& j);
  Json to_json() const;
};

// What a recorded step number needs added to count from 1, as the log counts: 0, or 1 for a built-in
// pilot's report from before steps.numbered_from (its workers counted from 0; a program's never did).
std::int64_t step_number_offset(const RunReport& r);

// One section alone, as report.json holds it (instantiated for Reproduction,
// which `anchor reproduce`'s comparison makes on its own; Manifest, for what
// reads manifest.json itself; StageMemory and IoFigures, the measurements
// Report::set_resume copies from the stages).
template <class Section>
Json section_to_json(const Section& section);
// And read back (instantiated for Stage, which a driver completes before adding it).
template <class Section>
Section section_from_json(const Json& j);

}  // namespace anchor::run_report
