#pragma once
// The plan as make_plan writes it (format anchor.plan/v1, docs/plan.md), as
// typed structs: what format_plan and format_plan_summary print, and what the
// recommendation is chosen from, read from these instead of the JSON by key.
// Read and written exactly (common/json_doc.hpp): the plan's JSON, in
// report.json and from `anchor plan --json`, stays as make_plan writes it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/common/json_doc.hpp"

namespace anchor::plan::doc {

template <class T>
using Opt = std::optional<T>;
using json_doc::Rest;

struct Measured : Rest {
  Opt<std::string> device, memory_source;
  Opt<double> step_seconds, tokens_per_s, stall_percent, achieved_tflops, checkpoint_save_bytes,
      checkpoint_save_seconds;
};

struct StateBytes : Rest {
  Opt<double> total, parameters, gradients, optimizer;
};

struct MemoryPoint : Rest {
  Opt<std::int64_t> micro_batch, seq_len;
  Opt<double> measured_bytes, fitted_bytes, residual_bytes;
};

struct MemoryModel : Rest {
  Opt<std::string> formula, note, measured_precision;
  Opt<double> fixed_bytes, other_fixed_bytes, a_bytes_per_token, b_bytes_per_token_per_seq;
  Opt<StateBytes> state_bytes;
  Opt<std::vector<MemoryPoint>> points;
};

struct Target : Rest {
  Opt<std::int64_t> micro_batch, seq_len, grad_accum, nodes, gpus_per_node;
  Opt<std::string> precision;
  Opt<double> headroom, long_run_steps;
};

struct RocmQualification : Rest {
  Opt<std::string> status, custom_ops_note;
  Opt<std::vector<std::string>> packages, exercised_by_pilot;
};

// devices[].scaling: the device at every GPU count searched.
struct ScalingPoint : Rest {
  Opt<std::int64_t> gpus, nodes;
  Opt<bool> fits, meets_deadline;
  Opt<std::string> strategy, pricing;
  Opt<double> step_seconds, tokens_per_s, scaling_efficiency, communication_share, days, cost;
};

struct Knee : Rest {
  Opt<std::int64_t> gpus;
  Opt<double> scaling_efficiency;
  Opt<std::string> cause;
};

struct Scaling : Rest {
  Opt<double> min_scaling_efficiency, deadline_days;
  Opt<std::vector<ScalingPoint>> curve;
  Opt<Knee> knee;
};

// piloted_device: the whole run where the pilot ran.
struct PilotedDevice : Rest {
  Opt<std::string> device, basis;
  Opt<double> days;
  Opt<bool> within_deadline;
};

// node: what the preflight measured of the node, as the plan uses it.
struct NodeInput : Rest {
  Opt<double> tokens_per_s_per_node, read_mb_per_s;
  Opt<std::string> basis;
};

struct CommunicationCheck : Rest {
  Opt<double> world, gradient_bytes, messages, predicted_comm_s, measured_comm_s, measured_over_predicted;
  Opt<std::string> what;
};

struct NodeAllReduce : Rest {
  Opt<double> ranks, latency_s, bus_bandwidth_bytes_per_s;
  Opt<std::string> backend, basis;
  Opt<CommunicationCheck> check;
};

struct PlanNode : Rest {
  Opt<NodeInput> input;
  Opt<NodeAllReduce> all_reduce;
};

// devices[]: one catalog device evaluated for the target.
struct Device : Rest {
  Opt<std::string> name, strategy, decision, step_time_is, term, cheaper_term, pricing;
  Opt<bool> fits, meets_deadline, input_bound;
  Opt<std::int64_t> sharding_degree, max_micro_batch, gpus, nodes;
  Opt<double> predicted_peak_bytes, projected_step_seconds, projected_tokens_per_s, comm_seconds_per_step, days,
      cost_7_day, cost_30_day, cost_on_demand, cost;
  Opt<RocmQualification> rocm_qualification;
  Opt<Scaling> scaling;
};

struct Recommendation : Rest {
  Opt<std::string> device, strategy, term, cheaper_term, pricing, why;
  Opt<std::int64_t> gpus, nodes, sharding_degree;
  Opt<double> days, cost;
};

struct BudgetItem : Rest {
  Opt<std::string> name, detail;
  Opt<double> hours;
};

struct Budget : Rest {
  Opt<std::string> device, currency, prices_are, term, cheaper_term, pricing, pricing_why, note;
  Opt<std::vector<BudgetItem>> items;
  Opt<double> hours, days, margin, cost_7_day, cost_30_day, cost_on_demand, cost, gpu_hours, expected_restarts,
      terms_7_day, terms_30_day;
};

struct Plan : Rest {
  Opt<std::string> format, why;
  Opt<Measured> measured;
  Opt<MemoryModel> memory_model;
  Opt<Target> target;
  Opt<std::vector<Device>> devices;
  Opt<Recommendation> recommendation;
  Opt<Budget> budget;
  Opt<PilotedDevice> piloted_device;
  Opt<PlanNode> node;
  Opt<std::vector<std::string>> warnings, assumptions, advice;
};

// Never throw: what a plan lacks is std::nullopt (json_doc::read).
Plan plan_from_json(const nlohmann::json& j);
Device device_from_json(const nlohmann::json& j);
Budget budget_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Recommendation& r);

}  // namespace anchor::plan::doc
