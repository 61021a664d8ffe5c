// format_plan: the plan as text tables for a terminal.
#include <cmath>
#include <iomanip>
#include <sstream>

#include "anchor/common/json_doc.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/plan/plan_doc.hpp"

namespace anchor::plan {
namespace {

using json = nlohmann::json;

std::string f(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

using json_doc::or_empty;

// A figure the plan may lack: 0.
double d(const doc::Opt<double>& v) { return v.value_or(0.0); }

// A field as text: a string as it is, a number as JSON writes it, "-" when the plan lacks it.
std::string s(const doc::Opt<std::string>& v) { return v ? *v : "-"; }
template <class T>
std::string s(const doc::Opt<T>& v) {
  return v ? json(*v).dump() : "-";
}

std::string bytes(double b) {
  const double a = std::fabs(b);
  if (a >= 1024.0 * 1024 * 1024) return f(b / (1024.0 * 1024 * 1024), 2) + " GiB";
  if (a >= 1024.0 * 1024) return f(b / (1024.0 * 1024), 2) + " MiB";
  if (a >= 1024.0) return f(b / 1024.0, 1) + " KiB";
  return f(b, 0) + " B";
}

std::string seconds(double v) {
  if (v >= 1.0) return f(v, 2) + " s";
  if (v >= 1e-3) return f(v * 1e3, 2) + " ms";
  return f(v * 1e6, 1) + " us";
}

// The sections below write to one stream in order: the std::left/std::right
// set by one section carries into the next, as when they were one function.

void write_measured(std::ostream& o, const doc::Measured& me) {
  o << "Measured on " << s(me.device) << " (memory: " << s(me.memory_source) << "): step "
    << seconds(d(me.step_seconds)) << ", " << f(d(me.tokens_per_s), 0) << " tokens/s, stall "
    << f(d(me.stall_percent), 1) << "%, " << f(d(me.achieved_tflops), 4) << " TFLOP/s, checkpoint "
    << bytes(d(me.checkpoint_save_bytes)) << " in " << seconds(d(me.checkpoint_save_seconds)) << "\n\n";
}

void write_memory_model(std::ostream& o, const doc::MemoryModel& mm) {
  const doc::StateBytes& state = or_empty(mm.state_bytes);
  o << "Memory model: " << s(mm.formula) << "\n";
  o << "  fixed " << bytes(d(mm.fixed_bytes)) << " = state " << bytes(d(state.total)) << " (params "
    << bytes(d(state.parameters)) << ", grads " << bytes(d(state.gradients)) << ", optimizer "
    << bytes(d(state.optimizer)) << ") + other fixed " << bytes(d(mm.other_fixed_bytes)) << "\n";
  o << "  a = " << f(d(mm.a_bytes_per_token), 2) << " B/token, b = " << f(d(mm.b_bytes_per_token_per_seq), 4)
    << " B/token/position (measured in " << s(mm.measured_precision) << ")\n";
  if (!mm.note.value_or("").empty()) o << "  note: " << *mm.note << "\n";
  o << "  " << std::left << std::setw(8) << "mb" << std::setw(8) << "T" << std::setw(14) << "measured" << std::setw(14)
    << "fitted"
    << "residual\n";
  for (const auto& pt : or_empty(mm.points))
    o << "  " << std::setw(8) << s(pt.micro_batch) << std::setw(8) << s(pt.seq_len) << std::setw(14)
      << bytes(d(pt.measured_bytes)) << std::setw(14) << bytes(d(pt.fitted_bytes)) << f(d(pt.residual_bytes), 0)
      << " B\n";
}

void write_target(std::ostream& o, const doc::Target& t) {
  o << "\nTarget: micro_batch " << s(t.micro_batch) << ", seq_len " << s(t.seq_len) << ", grad_accum "
    << s(t.grad_accum) << ", " << s(t.precision) << ", " << s(t.nodes) << " node(s) x " << s(t.gpus_per_node)
    << " GPUs, headroom " << f(d(t.headroom) * 100, 0) << "%, " << f(d(t.long_run_steps), 0) << " steps\n\n";
}

// An amount of money: cents below 100, whole units above.
std::string money(double v) { return f(v, v < 100 ? 2 : 0); }

void write_device_table(std::ostream& o, const std::vector<doc::Device>& devices) {
  o << "  " << std::setw(16) << "device" << std::setw(6) << "GPUs" << std::setw(6) << "fits" << std::setw(9)
    << "strategy" << std::setw(7) << "degree" << std::setw(12) << "peak" << std::setw(9) << "max mb" << std::setw(12)
    << "step (est)" << std::setw(11) << "comm/step" << std::setw(9) << "days" << std::setw(11) << "on demand"
    << std::setw(13) << "7-day cost"
    << "30-day cost\n";
  for (const auto& dv : devices) {
    o << "  " << std::setw(16) << s(dv.name) << std::setw(6) << s(dv.gpus) << std::setw(6)
      << (dv.fits.value_or(false) ? "yes" : "NO") << std::setw(9) << s(dv.strategy) << std::setw(7)
      << s(dv.sharding_degree) << std::setw(12) << bytes(d(dv.predicted_peak_bytes)) << std::setw(9)
      << s(dv.max_micro_batch) << std::setw(12) << seconds(d(dv.projected_step_seconds)) << std::setw(11)
      << seconds(d(dv.comm_seconds_per_step)) << std::setw(9) << f(d(dv.days), 2) << std::setw(11)
      << (dv.cost_on_demand ? money(*dv.cost_on_demand) : std::string("-")) << std::setw(13) << f(d(dv.cost_7_day), 0)
      << f(d(dv.cost_30_day), 0) << "\n";
  }
  o << "\n";
  for (const auto& dv : devices) o << "  " << s(dv.name) << ": " << s(dv.decision) << "\n";
}

// How the recommendation's cost is paid: "on-demand", "7-day terms"; a plan
// written before on-demand prices names only the cheaper term.
std::string paid(const doc::Recommendation& r) {
  if (r.pricing) return *r.pricing == "on-demand" ? *r.pricing : *r.pricing + " terms";
  return s(r.cheaper_term) + " terms";
}

// Each device's scaling curve, its knee and the count planned.
void write_scaling(std::ostream& o, const std::vector<doc::Device>& devices) {
  for (const auto& dv : devices) {
    if (!dv.scaling || !dv.scaling->curve || dv.scaling->curve->size() < 2) continue;
    const doc::Scaling& sc = *dv.scaling;
    o << "\nScaling on " << s(dv.name) << " (planned: " << s(dv.gpus) << " GPUs; knee below "
      << f(d(sc.min_scaling_efficiency), 2) << " efficiency; deadline " << f(d(sc.deadline_days), 1) << " days):\n";
    o << "  " << std::setw(6) << "GPUs" << std::setw(7) << "nodes" << std::setw(12) << "step" << std::setw(14)
      << "tokens/s" << std::setw(12) << "efficiency" << std::setw(8) << "comm" << std::setw(10) << "days"
      << "cost\n";
    for (const auto& pt : *sc.curve) {
      o << "  " << std::setw(6) << s(pt.gpus) << std::setw(7) << s(pt.nodes);
      if (!pt.fits.value_or(false)) {
        o << "does not fit\n";
        continue;
      }
      o << std::setw(12) << seconds(d(pt.step_seconds)) << std::setw(14) << f(d(pt.tokens_per_s), 0) << std::setw(12)
        << f(d(pt.scaling_efficiency), 2) << std::setw(8) << (f(d(pt.communication_share) * 100, 0) + "%")
        << std::setw(10) << f(d(pt.days), 2) << money(d(pt.cost)) << (pt.meets_deadline.value_or(true) ? "" : " (late)")
        << "\n";
    }
    if (sc.knee)
      o << "  knee: at " << s(sc.knee->gpus) << " GPUs efficiency is " << f(d(sc.knee->scaling_efficiency), 2) << ": "
        << s(sc.knee->cause) << "\n";
    else
      o << "  no knee: efficiency stays at or above " << f(d(sc.min_scaling_efficiency), 2) << " to the last count\n";
  }
}

void write_recommendation(std::ostream& o, const doc::Recommendation& r) {
  o << "\nRecommendation: ";
  if (!r.device) {
    o << "none. " << s(r.why) << "\n";
  } else {
    o << s(r.gpus) << " x " << s(r.device) << ", " << s(r.strategy) << " (degree " << s(r.sharding_degree) << "), "
      << f(d(r.days), 2) << " days, cost " << money(d(r.cost)) << " (" << paid(r) << ")\n  " << s(r.why) << "\n";
  }
}

void write_budget(std::ostream& o, const doc::Budget& b) {
  o << "\nBudget on " << s(b.device) << " (" << s(b.currency) << ", prices " << s(b.prices_are) << "):\n";
  for (const auto& it : or_empty(b.items))
    o << "  " << std::setw(16) << s(it.name) << std::right << std::setw(12) << f(d(it.hours), 3) << " h  " << std::left
      << s(it.detail) << "\n";
  o << "  " << std::setw(16) << "total" << std::right << std::setw(12) << f(d(b.hours), 3) << " h" << std::left
    << "  -> " << f(d(b.days), 2) << " days with " << f(d(b.margin) * 100, 0) << "% margin: " << s(b.term) << " term\n";
  o << "  ";
  if (b.cost_on_demand)
    o << "on demand: " << f(d(b.gpu_hours), 1) << " GPU-hours = " << money(*b.cost_on_demand) << "; ";
  o << "7-day: " << s(b.terms_7_day) << " term(s) = " << f(d(b.cost_7_day), 0) << "; 30-day: " << s(b.terms_30_day)
    << " term(s) = " << f(d(b.cost_30_day), 0) << "; expected restarts " << f(d(b.expected_restarts), 2) << "\n";
  if (b.pricing) o << "  pay " << *b.pricing << ": " << s(b.pricing_why) << "\n";
  if (b.note) o << "  " << *b.note << "\n";
}

void write_rocm_qualifications(std::ostream& o, const std::vector<doc::Device>& devices) {
  for (const auto& dv : devices)
    if (const auto& q = dv.rocm_qualification) {
      o << "\nROCm qualification for " << s(dv.name) << ": " << s(q->status) << "\n";
      o << "  custom ops/kernels: " << s(q->custom_ops_note) << "\n";
      for (const auto& pk : or_empty(q->packages)) o << "  package: " << pk << "\n";
      for (const auto& ex : or_empty(q->exercised_by_pilot)) o << "  exercised: " << ex << "\n";
    }
}

void write_warnings_and_assumptions(std::ostream& o, const doc::Plan& p) {
  if (!or_empty(p.warnings).empty()) {
    o << "\nWarnings:\n";
    for (const auto& w : *p.warnings) o << "  - " << w << "\n";
  }
  o << "\nAssumptions:\n";
  for (const auto& a : or_empty(p.assumptions)) o << "  - " << a << "\n";
}

}  // namespace

namespace {
// The node the preflight measured, as the plan used it.
void write_node(std::ostream& o, const doc::PlanNode& n) {
  if (const auto& in = n.input)
    o << "\nThe node's input: " << f(d(in->tokens_per_s_per_node) / 1e6, 2) << " M tokens/s ("
      << f(d(in->read_mb_per_s), 1) << " MB/s; " << s(in->basis) << ")\n";
  if (const auto& a = n.all_reduce) {
    o << "The node's all-reduce: " << f(d(a->bus_bandwidth_bytes_per_s) / 1e9, 2) << " GB/s bus bandwidth, "
      << f(d(a->latency_s) * 1e6, 1) << " us latency over " << f(d(a->ranks), 0) << " ranks (" << s(a->backend)
      << "; MEASURED)\n";
    if (const auto& c = a->check)
      o << "  the communication model against the pilot's " << f(d(c->world), 0) << " ranks: predicted "
        << f(d(c->predicted_comm_s) * 1e3, 3) << " ms, measured " << f(d(c->measured_comm_s) * 1e3, 3) << " ms ("
        << f(d(c->measured_over_predicted), 2) << "x; " << s(c->what) << ")\n";
  }
}
}  // namespace

std::string format_plan(const nlohmann::json& plan) {
  const doc::Plan p = doc::plan_from_json(plan);
  std::ostringstream o;
  o << "anchor plan (" << s(p.format) << ")\n\n";
  write_measured(o, or_empty(p.measured));
  write_memory_model(o, or_empty(p.memory_model));
  write_target(o, or_empty(p.target));
  write_device_table(o, or_empty(p.devices));
  write_scaling(o, or_empty(p.devices));
  write_recommendation(o, or_empty(p.recommendation));
  if (p.piloted_device)
    o << "\nOn the " << s(p.piloted_device->device) << " it was piloted on: " << f(d(p.piloted_device->days), 3)
      << " days (" << s(p.piloted_device->basis) << ")\n";
  if (p.node) write_node(o, *p.node);
  if (p.advice && !p.advice->empty()) {
    o << "\nAdvice:\n";
    for (const auto& a : *p.advice) o << "  - " << a << "\n";
  }
  if (p.budget) write_budget(o, *p.budget);
  write_rocm_qualifications(o, or_empty(p.devices));
  write_warnings_and_assumptions(o, p);
  return o.str();
}

std::string format_plan_summary(const nlohmann::json& plan, const std::string& run_dir) {
  const doc::Plan p = doc::plan_from_json(plan);
  std::ostringstream o;
  if (!p.recommendation) {
    o << "Plan: not planned" << (p.why ? ": " + *p.why : std::string()) << "\n";
    return o.str();
  }
  const doc::Recommendation& r = *p.recommendation;
  o << "Plan: ";
  if (!r.device) {
    o << "no device fits. " << s(r.why) << "\n";
  } else {
    const doc::Device* dev = nullptr;
    for (const auto& dv : or_empty(p.devices))
      if (dv.name == r.device) dev = &dv;
    o << s(r.gpus) << " x " << s(r.device) << ", " << s(r.strategy) << " (degree " << s(r.sharding_degree) << "), "
      << f(d(r.days), 2) << " days, cost " << money(d(r.cost)) << " " << paid(r);
    if (p.budget) o << " (prices " << s(p.budget->prices_are) << ")";
    o << "\n";
    if (dev) {
      o << "  fits: " << s(dev->decision) << "\n";
      if (dev->step_time_is) o << "  step time: " << *dev->step_time_is << "\n";
      if (dev->scaling && dev->scaling->knee)
        o << "  more GPUs stop paying at " << s(dev->scaling->knee->gpus) << " (efficiency "
          << f(d(dev->scaling->knee->scaling_efficiency), 2) << "): " << s(dev->scaling->knee->cause) << "\n";
    }
  }
  if (p.piloted_device && p.piloted_device->within_deadline.value_or(false))
    o << "  it also fits the " << s(p.piloted_device->device)
      << " it was piloted on: " << f(d(p.piloted_device->days) * 24, 2)
      << " hours for the whole run, within budget.deadline_days\n";
  for (const auto& w : or_empty(p.warnings)) o << "  warning: " << w << "\n";
  o << "  the whole plan (every device, the memory model, the budget, " << or_empty(p.assumptions).size()
    << " assumptions): " << run_dir << "/report.md; `anchor plan " << run_dir
    << "` plans it again from the measurements\n";
  return o.str();
}

}  // namespace anchor::plan
