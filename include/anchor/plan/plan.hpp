#pragma once
// The plan: from a pilot's measurements to a memory model, a parallelism
// strategy and projected step time per catalog device, and a budget for the
// whole run (docs/plan.md has every formula and assumption).
//
// Everything here is arithmetic on numbers the pilot measured plus the
// catalog's spec-sheet figures; nothing is run. The output says which figures
// are measured and which are estimates.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"
#include "anchor/plan/catalog.hpp"
#include "anchor/plan/memory_model.hpp"

namespace anchor::plan {

// Model FLOPs utilisation assumed for projected step times (no device in the
// catalog was measured): projected step = FLOPs / (peak * kAssumedMfu).
inline constexpr double kAssumedMfu = 0.4;
// The fraction of the memory bandwidth's peak a phase that streams its bytes
// reaches (STREAM-like kernels reach 0.8 to 0.9 of HBM's spec-sheet figure):
// the memory side of the step's roofline.
inline constexpr double kAssumedMemoryEfficiency = 0.8;

// Bytes each rank sends per optimizer step for the gradient/parameter
// collectives of a data-parallel strategy (ring algorithms, bandwidth term):
//   stage 0 (DDP) and ZeRO-1: 2*(n-1)/n * G once per step (all-reduce, or
//     reduce-scatter + all-gather of the same volume; no_sync during accumulation)
//   ZeRO-2: reduce-scatter (n-1)/n * G every micro-step + all-gather (n-1)/n * G
//   ZeRO-3: per micro-step, all-gather in forward and backward plus
//     reduce-scatter: 3*(n-1)/n * G each (1.5x DDP when grad_accum is 1)
// n is the sharding degree (the world size for DDP). With degree < world (the
// state sharded within groups of `degree`, replicated across world/degree
// groups), the shards are also all-reduced across replicas:
// 2*(r-1)/r * G/degree with r = world/degree. G = grad_bytes.
// Throws Error (kUsage) when world < 1, degree < 1, degree does not divide
// world, or stage is not 0..3.
double comm_bytes_per_step(int zero_stage, int world, int degree, double grad_bytes, int grad_accum);

// Young's checkpoint interval sqrt(2 * save_seconds * mtbf_seconds).
// Infinity when mtbf_seconds is infinite (no failures expected).
double young_daly_interval_s(double save_seconds, double mtbf_seconds);

// The inputs of the run budget, all in base units (seconds, GB, Gbit/s).
struct BudgetInput {
  int world = 1;  // GPUs: nodes * gpus_per_node
  int nodes = 1;
  double steps = 0;               // optimizer steps of the long run
  double compute_s_per_step = 0;  // compute + communication per step
  double data_wait_s_per_step = 0;
  double evals = 0;             // periodic evals in the whole run
  double eval_s = 0;            // seconds per eval
  double save_s = 0;            // seconds per checkpoint save (measured)
  double checkpoint_bytes = 0;  // one full checkpoint
  double failures_per_day = 0;  // per node-day
  double restart_minutes = 0;
  double download_gb = 0;
  double ingress_gbps = 1;
  double preprocess_hours = 0;
  double export_gb = 0;
  double egress_gbps = 1;
  // The pilot's copy_off to export.copy_to (write, fsync and publish), Gbit/s;
  // 0: not measured, egress_gbps (assumed) times the copies off the node.
  double egress_measured_gbps = 0;
  // The download and preprocess commands timed on a sample (budget.download_command,
  // budget.preprocess_command), bytes of the sample per second; 0: not run,
  // ingress_gbps and preprocess_hours (assumed) stand.
  double download_measured_bytes_per_s = 0, download_sample_bytes = 0;
  double preprocess_measured_bytes_per_s = 0, preprocess_sample_bytes = 0;
  double margin = 0;
  double price_on_demand = 0;  // per GPU-hour; 0: the catalog gives none
  double price_7_day = 0;      // per GPU-hour
  double price_30_day = 0;
  // Whether the run's length (train.total_tokens or total_steps) is given:
  // without it the budget is a compatibility and profiling pass, and a 30-day
  // term is not offered (nor without an operational margin, budget.margin).
  bool work_estimated = true;
};

// {"items": [{"name","hours","detail"}...], "hours", "days_without_margin",
//  "days", "term", "checkpoint_interval_s", "checkpoints", "expected_restarts",
//  "gpu_hours", "cost_on_demand" (null without a price), "terms_7_day",
//  "cost_7_day", "terms_30_day", "cost_30_day", "cheaper_term" (of the two
//  terms), "pricing" (the cheapest way to pay that is offered: "on-demand",
//  "7-day" or "30-day"), "cost" (its cost), "pricing_why"}; docs/plan.md
//  gives each formula.
nlohmann::json make_budget(const BudgetInput& in);

// "7-day" when days <= 7, "30-day" when <= 30, else "longer than 30 days".
std::string term_for_days(double days);

// Everything the plan takes from a pilot, typed: the built-in worker's
// measurements or the user's program's (docs/program.md, "The plan").
struct Measured {
  std::string device = "unknown";  // where the pilot ran: cpu, cuda, rocm
  std::string libtorch;            // the LibTorch (built-in) or torch (program) it ran; "" unknown
  std::vector<std::string> stages_passed;
  bool program = false;  // the user's own program: the planned shape is the program's

  // The model.
  double parameters = 0;
  int n_layer = 0;                        // 0: not known (a program that did not say)
  double n_embd = 0;                      // 0: not known
  std::optional<int> n_head, vocab_size;  // the built-in model's, checked against the planned config
  double flops_per_token = 0;             // training FLOPs per token at seq_len
  std::string flops_source;               // how flops_per_token was obtained

  // The measured step's shape. The built-in's micro-batch is its config's (0 here).
  std::int64_t micro_batch = 0, seq_len = 0;
  int grad_accum = 1;

  // The step, one rank.
  double step_seconds = 0, step_tokens = 0, tokens_per_s = 0;
  double data_wait_s = 0, compute_s = 0, stall_percent = 0;

  // The training data, in sequences of seq_len (the built-in loader's windows); 0: not known.
  double train_sequences = 0;

  // One checkpoint save of the full state.
  double save_bytes = 0, save_seconds = 0;

  // The export copied off the node (the copy_off stage, export.copy_to); 0: not measured.
  double copy_off_bytes = 0, copy_off_seconds = 0;

  // Several ranks: the measured step's communication (DDP's all-reduce) at
  // the rank that spent least in it (the others also waited for it), the
  // pilot's world and strategy; 0 / "" when one rank.
  int world_size = 1;
  std::string strategy;
  double comm_s_min = 0;

  // The pipeline's commands timed on a sample (report.json's pipeline): bytes
  // of the sample and seconds; 0: not run.
  double download_bytes = 0, download_seconds = 0, preprocess_bytes = 0, preprocess_seconds = 0;

  // The node, from the preflight (report.json's node); 0: not measured.
  // The training data read from storage, in tokens/s of this loader; the
  // all-reduce's latency and bus bandwidth over allreduce_ranks ranks.
  double node_input_tokens_per_s = 0, node_read_mb_per_s = 0;
  double allreduce_latency_s = 0, allreduce_busbw = 0;
  int allreduce_ranks = 0;
  std::string allreduce_backend;

  // Memory: the step's peak at one or more (micro_batch, seq_len) points, the
  // state it holds, and (a program's) the bytes held before the first step.
  std::string memory_source;
  Precision precision = Precision::kFp32;
  std::vector<MemoryPoint> memory_points;
  StateBytes state;
  std::optional<double> baseline_bytes;
};

// The memory model of the measured points: the fitted model with two or more
// points; with one (a program that cannot be probed), fixed = the state plus
// what was held before the first step, and everything above it activations
// linear in micro_batch x seq_len (fit().note says what that costs).
MemoryModel memory_model(const Measured& m);

// The plan for `cfg` (the report's config with any overrides applied) from
// the measurements. Devices: cfg.budget.devices, or all of the catalog. The
// target shape is cfg's (train.micro_batch, data.seq_len, train.grad_accum,
// train.precision), or for a program the shape it measured. Throws Error
// (kUsage) when a measurement is unusable or a device named in budget.devices
// is not in the catalog.
nlohmann::json make_plan(const Measured& m, const Catalog& catalog, const config::Config& cfg);

// A readable rendering of make_plan's output (tables, then assumptions).
std::string format_plan(const nlohmann::json& plan);
// The plan in a few lines for the pilot's console: the recommendation, why it
// fits, days and cost, the step time's basis, the warnings, and where the
// whole plan is (report.md in `run_dir`, `anchor plan run_dir`).
std::string format_plan_summary(const nlohmann::json& plan, const std::string& run_dir);

}  // namespace anchor::plan
