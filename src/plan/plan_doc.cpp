// The plan's reader and writer (plan_doc.hpp): one list of fields per struct.
#include "anchor/plan/plan_doc.hpp"

namespace anchor::plan::doc {

template <class V>
void fields(V& v, Measured& s) {
  v("device", s.device);
  v("memory_source", s.memory_source);
  v("step_seconds", s.step_seconds);
  v("tokens_per_s", s.tokens_per_s);
  v("stall_percent", s.stall_percent);
  v("achieved_tflops", s.achieved_tflops);
  v("checkpoint_save_bytes", s.checkpoint_save_bytes);
  v("checkpoint_save_seconds", s.checkpoint_save_seconds);
}

template <class V>
void fields(V& v, StateBytes& s) {
  v("total", s.total);
  v("parameters", s.parameters);
  v("gradients", s.gradients);
  v("optimizer", s.optimizer);
}

template <class V>
void fields(V& v, MemoryPoint& s) {
  v("micro_batch", s.micro_batch);
  v("seq_len", s.seq_len);
  v("measured_bytes", s.measured_bytes);
  v("fitted_bytes", s.fitted_bytes);
  v("residual_bytes", s.residual_bytes);
}

template <class V>
void fields(V& v, MemoryModel& s) {
  v("formula", s.formula);
  v("note", s.note);
  v("measured_precision", s.measured_precision);
  v("fixed_bytes", s.fixed_bytes);
  v("other_fixed_bytes", s.other_fixed_bytes);
  v("a_bytes_per_token", s.a_bytes_per_token);
  v("b_bytes_per_token_per_seq", s.b_bytes_per_token_per_seq);
  v("state_bytes", s.state_bytes);
  v("points", s.points);
}

template <class V>
void fields(V& v, Target& s) {
  v("micro_batch", s.micro_batch);
  v("seq_len", s.seq_len);
  v("grad_accum", s.grad_accum);
  v("nodes", s.nodes);
  v("gpus_per_node", s.gpus_per_node);
  v("precision", s.precision);
  v("headroom", s.headroom);
  v("long_run_steps", s.long_run_steps);
}

template <class V>
void fields(V& v, RocmQualification& s) {
  v("status", s.status);
  v("custom_ops_note", s.custom_ops_note);
  v("packages", s.packages);
  v("exercised_by_pilot", s.exercised_by_pilot);
}

template <class V>
void fields(V& v, ScalingPoint& s) {
  v("gpus", s.gpus);
  v("nodes", s.nodes);
  v("fits", s.fits);
  v("meets_deadline", s.meets_deadline);
  v("strategy", s.strategy);
  v("pricing", s.pricing);
  v("step_seconds", s.step_seconds);
  v("tokens_per_s", s.tokens_per_s);
  v("scaling_efficiency", s.scaling_efficiency);
  v("communication_share", s.communication_share);
  v("days", s.days);
  v("cost", s.cost);
}

template <class V>
void fields(V& v, Knee& s) {
  v("gpus", s.gpus);
  v("scaling_efficiency", s.scaling_efficiency);
  v("cause", s.cause);
}

template <class V>
void fields(V& v, Scaling& s) {
  v("min_scaling_efficiency", s.min_scaling_efficiency);
  v("deadline_days", s.deadline_days);
  v("curve", s.curve);
  v("knee", s.knee);
}

template <class V>
void fields(V& v, PilotedDevice& s) {
  v("device", s.device);
  v("basis", s.basis);
  v("days", s.days);
  v("within_deadline", s.within_deadline);
}

template <class V>
void fields(V& v, Device& s) {
  v("name", s.name);
  v("strategy", s.strategy);
  v("decision", s.decision);
  v("step_time_is", s.step_time_is);
  v("term", s.term);
  v("cheaper_term", s.cheaper_term);
  v("fits", s.fits);
  v("meets_deadline", s.meets_deadline);
  v("input_bound", s.input_bound);
  v("gpus", s.gpus);
  v("nodes", s.nodes);
  v("sharding_degree", s.sharding_degree);
  v("max_micro_batch", s.max_micro_batch);
  v("predicted_peak_bytes", s.predicted_peak_bytes);
  v("projected_step_seconds", s.projected_step_seconds);
  v("projected_tokens_per_s", s.projected_tokens_per_s);
  v("comm_seconds_per_step", s.comm_seconds_per_step);
  v("days", s.days);
  v("cost_7_day", s.cost_7_day);
  v("cost_30_day", s.cost_30_day);
  v("cost_on_demand", s.cost_on_demand);
  v("cost", s.cost);
  v("pricing", s.pricing);
  v("rocm_qualification", s.rocm_qualification);
  v("scaling", s.scaling);
}

template <class V>
void fields(V& v, Recommendation& s) {
  v("device", s.device);
  v("strategy", s.strategy);
  v("term", s.term);
  v("cheaper_term", s.cheaper_term);
  v("pricing", s.pricing);
  v("why", s.why);
  v("gpus", s.gpus);
  v("nodes", s.nodes);
  v("sharding_degree", s.sharding_degree);
  v("days", s.days);
  v("cost", s.cost);
}

template <class V>
void fields(V& v, BudgetItem& s) {
  v("name", s.name);
  v("detail", s.detail);
  v("hours", s.hours);
}

template <class V>
void fields(V& v, Budget& s) {
  v("device", s.device);
  v("currency", s.currency);
  v("prices_are", s.prices_are);
  v("term", s.term);
  v("cheaper_term", s.cheaper_term);
  v("note", s.note);
  v("items", s.items);
  v("hours", s.hours);
  v("days", s.days);
  v("margin", s.margin);
  v("cost_7_day", s.cost_7_day);
  v("cost_30_day", s.cost_30_day);
  v("cost_on_demand", s.cost_on_demand);
  v("cost", s.cost);
  v("gpu_hours", s.gpu_hours);
  v("pricing", s.pricing);
  v("pricing_why", s.pricing_why);
  v("expected_restarts", s.expected_restarts);
  v("terms_7_day", s.terms_7_day);
  v("terms_30_day", s.terms_30_day);
}

template <class V>
void fields(V& v, NodeInput& s) {
  v("tokens_per_s_per_node", s.tokens_per_s_per_node);
  v("read_mb_per_s", s.read_mb_per_s);
  v("basis", s.basis);
}

template <class V>
void fields(V& v, CommunicationCheck& s) {
  v("world", s.world);
  v("gradient_bytes", s.gradient_bytes);
  v("messages", s.messages);
  v("predicted_comm_s", s.predicted_comm_s);
  v("measured_comm_s", s.measured_comm_s);
  v("measured_over_predicted", s.measured_over_predicted);
  v("what", s.what);
}

template <class V>
void fields(V& v, NodeAllReduce& s) {
  v("ranks", s.ranks);
  v("latency_s", s.latency_s);
  v("bus_bandwidth_bytes_per_s", s.bus_bandwidth_bytes_per_s);
  v("backend", s.backend);
  v("basis", s.basis);
  v("check", s.check);
}

template <class V>
void fields(V& v, PlanNode& s) {
  v("input", s.input);
  v("all_reduce", s.all_reduce);
}

template <class V>
void fields(V& v, Plan& s) {
  v("format", s.format);
  v("why", s.why);
  v("measured", s.measured);
  v("memory_model", s.memory_model);
  v("target", s.target);
  v("devices", s.devices);
  v("recommendation", s.recommendation);
  v("budget", s.budget);
  v("piloted_device", s.piloted_device);
  v("node", s.node);
  v("advice", s.advice);
  v("warnings", s.warnings);
  v("assumptions", s.assumptions);
}

Plan plan_from_json(const nlohmann::json& j) { return json_doc::read<Plan>(j); }
Device device_from_json(const nlohmann::json& j) { return json_doc::read<Device>(j); }
Budget budget_from_json(const nlohmann::json& j) { return json_doc::read<Budget>(j); }
nlohmann::json to_json(const Recommendation& r) { return json_doc::write(r); }

}  // namespace anchor::plan::doc
