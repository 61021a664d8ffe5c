#include "anchor/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "anchor/error.hpp"
#include "anchor/plan/plan_doc.hpp"

namespace anchor::plan {
namespace {

using json = nlohmann::json;

constexpr double kSecondsPerDay = 86400.0;
// Training FLOPs per token at another sequence length: the attention term
// 12 * n_layer * n_embd * T (PaLM appendix B; 6N is the rest) moves with T.
double flops_per_token_at(const Measured& m, double seq_len) {
  return m.flops_per_token + 12.0 * m.n_layer * m.n_embd * (seq_len - static_cast<double>(m.seq_len));
}

const char* strategy_name(int stage, int world) {
  switch (stage) {
    case 0: return world == 1 ? "single" : "ddp";
    case 1: return "zero1";
    case 2: return "zero2";
    default: return "zero3";
  }
}

std::vector<int> divisors_from_2(int n) {
  std::vector<int> d;
  for (int i = 2; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

json breakdown_json(const MemoryBreakdown& b) {
  return {{"parameters", b.parameters},     {"gradients", b.gradients},
          {"optimizer", b.optimizer},       {"other_fixed", b.other_fixed},
          {"cast_weights", b.cast_weights}, {"gather_buffer", b.gather_buffer},
          {"activations", b.activations},   {"total", b.total}};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------
// Pure arithmetic.

double comm_bytes_per_step(int stage, int world, int degree, double g, int grad_accum) {
  if (world < 1 || degree < 1 || world % degree != 0 || stage < 0 || stage > 3 || grad_accum < 1)
    throw Error(ErrorKind::kUsage, "comm volume: stage " + std::to_string(stage) + ", world " + std::to_string(world) +
                                       ", degree " + std::to_string(degree) + ", grad_accum " +
                                       std::to_string(grad_accum) +
                                       "; need stage 0..3, degree dividing world, grad_accum >= 1");
  const double ga = grad_accum;
  if (stage == 0) {
    const double n = world;
    return 2.0 * (n - 1.0) / n * g;
  }
  const double n = degree;
  const double f = (n - 1.0) / n;
  double bytes = 0;
  switch (stage) {
    case 1: bytes = 2.0 * f * g; break;
    case 2: bytes = ga * f * g + f * g; break;
    default: bytes = 3.0 * ga * f * g; break;
  }
  // Replica groups of `degree` ranks: exact, as degree divides world (checked above).
  const int replicas = world / degree;
  const double r = replicas;
  if (r > 1) bytes += 2.0 * (r - 1.0) / r * g / n;
  return bytes;
}

double young_daly_interval_s(double save_seconds, double mtbf_seconds) {
  if (std::isinf(mtbf_seconds)) return std::numeric_limits<double>::infinity();
  return std::sqrt(2.0 * save_seconds * mtbf_seconds);
}

std::string term_for_days(double days) {
  if (days <= 7.0) return "7-day";
  if (days <= 30.0) return "30-day";
  return "longer than 30 days";
}

namespace {

// The budget's line items, their running total and the figures its summary
// reports beside them.
struct BudgetItems {
  json items = json::array();
  double total_s = 0;
  double mtbf_s = 0;
  double tau = 0;
  double checkpoints = 0;
  double restarts = 0;

  void add(const char* name, double seconds, std::string detail) {
    items.push_back({{"name", name}, {"hours", seconds / 3600.0}, {"detail", std::move(detail)}});
    total_s += seconds;
  }
};

// Download, preprocessing, training steps, data loading and eval; returns the
// seconds of work (training, data, eval) a failure can interrupt.
double add_work_items(const BudgetInput& in, BudgetItems& b) {
  // A command timed on a sample: the whole budget.download_gb at its rate (MEASURED).
  const auto timed = [&](const char* name, double rate, double sample, const char* instead) {
    const std::string on = " at " + fixed(rate / 1e6, 2) + " MB/s (MEASURED: budget." + name + "_command on a " +
                           fixed(sample / 1e6, 3) + " MB sample, extrapolated by size";
    if (in.download_gb <= 0)
      b.add(name, 0.0,
            "0 GB" + on + "; budget.download_gb is 0: give the data's size to extrapolate to, instead of " + instead +
                ")");
    else
      b.add(name, in.download_gb * 1e9 / rate, fixed(in.download_gb, 1) + " GB" + on + ")");
  };
  if (in.download_measured_bytes_per_s > 0)
    timed("download", in.download_measured_bytes_per_s, in.download_sample_bytes, "budget.ingress_gbps");
  else
    b.add("download", in.download_gb * 8.0 / in.ingress_gbps,
          fixed(in.download_gb, 1) + " GB at " + fixed(in.ingress_gbps, 2) +
              " Gbit/s (budget.ingress_gbps, ASSUMED: budget.download_command would time it)");
  if (in.preprocess_measured_bytes_per_s > 0)
    timed("preprocess", in.preprocess_measured_bytes_per_s, in.preprocess_sample_bytes, "budget.preprocess_hours");
  else
    b.add("preprocess", in.preprocess_hours * 3600.0,
          "budget.preprocess_hours (ASSUMED: budget.preprocess_command would time it)");
  const double train_s = in.steps * in.compute_s_per_step;
  b.add("training_steps", train_s,
        fixed(in.steps, 0) + " steps x " + fixed(in.compute_s_per_step, 4) + " s (compute + communication)");
  const double data_s = in.steps * in.data_wait_s_per_step;
  b.add("data_loading", data_s,
        fixed(in.steps, 0) + " steps x " + fixed(in.data_wait_s_per_step, 4) +
            " s data wait (measured per token, scaled)");
  const double evals = in.evals;
  const double eval_s = evals * in.eval_s;
  b.add("eval", eval_s, fixed(evals, 0) + " evals x " + fixed(in.eval_s, 3) + " s");
  return train_s + data_s + eval_s;
}

// Checkpoint saves at the Young/Daly interval and the expected restarts.
void add_failure_items(const BudgetInput& in, double work_s, BudgetItems& b) {
  b.mtbf_s = in.failures_per_day > 0 ? kSecondsPerDay / (in.failures_per_day * std::max(1, in.nodes))
                                     : std::numeric_limits<double>::infinity();
  b.tau = young_daly_interval_s(in.save_s, b.mtbf_s);
  const double tau = b.tau;
  if (work_s > 0) b.checkpoints = std::isinf(tau) ? 1.0 : std::max(1.0, std::ceil(work_s / tau));
  const double ckpt_s = b.checkpoints * in.save_s;
  b.add("checkpoints", ckpt_s,
        fixed(b.checkpoints, 0) + " saves x " + fixed(in.save_s, 3) + " s (measured), every " +
            (std::isinf(tau) ? std::string("run (no failures expected)") : fixed(tau / 3600.0, 2) + " h (Young/Daly)"));
  const double exposed_days = (work_s + ckpt_s) / kSecondsPerDay;
  b.restarts = exposed_days * in.failures_per_day * std::max(1, in.nodes);
  const double lost_s = std::min(tau, work_s) / 2.0;
  const double restart_s = b.restarts * (in.restart_minutes * 60.0 + lost_s);
  b.add("restarts", restart_s,
        fixed(b.restarts, 2) + " expected x (" + fixed(in.restart_minutes, 1) + " min restart + " +
            fixed(lost_s / 60.0, 1) + " min lost work)");
}

// The export and the final checkpoint copied off the node.
void add_copy_items(const BudgetInput& in, double work_s, BudgetItems& b) {
  // Copies off the node at the pilot's measured copy_off rate when there is one, else budget.egress_gbps.
  const bool measured_egress = in.egress_measured_gbps > 0;
  const double egress = measured_egress ? in.egress_measured_gbps : in.egress_gbps;
  const std::string at =
      " at " + fixed(egress, 2) + " Gbit/s" +
      (measured_egress ? " (measured: the pilot's copy_off to export.copy_to)" : " (budget.egress_gbps, assumed)");
  b.add("export", in.export_gb * 8.0 / egress, fixed(in.export_gb, 1) + " GB" + at);
  const double copy_gb = in.checkpoint_bytes / 1e9;
  b.add("copy_off_node", work_s > 0 ? copy_gb * 8.0 / egress : 0.0,
        "final checkpoint " + fixed(copy_gb, 3) + " GB" + at);
}

// The ways to pay for the budget's GPU-hours, and the cheapest one offered:
// on demand (the hours used, when the catalog prices it), whole 7-day terms,
// and whole 30-day terms only when the work and the margin are estimated (a
// 7-day term is the bounded compatibility and profiling pass). Sets
// cost_on_demand, pricing, cost and pricing_why in `b`.
void price_options(const BudgetInput& in, double gpu_hours, double cost7, double cost30, json& b) {
  std::vector<std::pair<std::string, double>> offered;
  if (in.price_on_demand > 0) offered.emplace_back("on-demand", gpu_hours * in.price_on_demand);
  offered.emplace_back("7-day", cost7);
  std::string no_30;
  if (!in.work_estimated)
    no_30 =
        "the run's length is not given (train.total_tokens or train.total_steps): this prices a compatibility "
        "and profiling pass, and a 30-day term is not offered";
  else if (in.margin <= 0)
    no_30 = "budget.margin is 0: a 30-day term is offered only with an operational margin estimated";
  else
    offered.emplace_back("30-day", cost30);
  b["cost_on_demand"] = in.price_on_demand > 0 ? json(gpu_hours * in.price_on_demand) : json(nullptr);
  std::size_t best = 0;  // ties go to the earlier, less committed way
  for (std::size_t i = 1; i < offered.size(); ++i)
    if (offered[i].second < offered[best].second) best = i;
  b["pricing"] = offered[best].first;
  b["cost"] = offered[best].second;
  std::string why = offered[best].first == "on-demand"
                        ? fixed(gpu_hours, 1) + " GPU-hours on demand"
                        : "whole " + offered[best].first + " terms for " + std::to_string(in.world) + " GPUs";
  std::string others;
  for (std::size_t i = 0; i < offered.size(); ++i)
    if (i != best) others += (others.empty() ? "" : ", ") + offered[i].first + " " + fixed(offered[i].second, 0);
  if (!others.empty()) why += " (" + others + ")";
  if (!no_30.empty()) why += "; " + no_30;
  if (in.price_on_demand <= 0) why += "; the catalog gives no on-demand price for this device";
  b["pricing_why"] = why;
}

// The total with its margin, the terms it needs and what they cost.
json budget_summary(const BudgetInput& in, const BudgetItems& bi) {
  const double hours = bi.total_s / 3600.0;
  const double days_raw = hours / 24.0;
  const double days = days_raw * (1.0 + in.margin);
  const double terms7 = std::max(1.0, std::ceil(days / 7.0));
  const double terms30 = std::max(1.0, std::ceil(days / 30.0));
  const double cost7 = in.world * 7.0 * 24.0 * terms7 * in.price_7_day;
  const double cost30 = in.world * 30.0 * 24.0 * terms30 * in.price_30_day;
  json b;
  b["items"] = bi.items;
  b["hours"] = hours;
  b["days_without_margin"] = days_raw;
  b["margin"] = in.margin;
  b["days"] = days;
  b["term"] = term_for_days(days);
  b["mtbf_hours"] = std::isinf(bi.mtbf_s) ? json(nullptr) : json(bi.mtbf_s / 3600.0);
  b["checkpoint_interval_s"] = std::isinf(bi.tau) ? json(nullptr) : json(bi.tau);
  b["checkpoints"] = bi.checkpoints;
  b["expected_restarts"] = bi.restarts;
  b["gpus"] = in.world;
  b["gpu_hours"] = in.world * hours * (1.0 + in.margin);
  b["terms_7_day"] = terms7;
  b["cost_7_day"] = cost7;
  b["terms_30_day"] = terms30;
  b["cost_30_day"] = cost30;
  b["cheaper_term"] = cost7 <= cost30 ? "7-day" : "30-day";
  price_options(in, in.world * hours * (1.0 + in.margin), cost7, cost30, b);
  if (days > 30.0)
    b["note"] = "the run is longer than 30 days (" + fixed(days, 1) + " days with margin): it needs " +
                fixed(terms30, 0) + " consecutive 30-day terms or more GPUs";
  return b;
}

}  // namespace

nlohmann::json make_budget(const BudgetInput& in) {
  BudgetItems items;
  const double work_s = add_work_items(in, items);
  add_failure_items(in, work_s, items);
  add_copy_items(in, work_s, items);
  return budget_summary(in, items);
}

// ---------------------------------------------------------------------------
// From the report.

MemoryModel memory_model(const Measured& m) {
  if (m.program && m.memory_points.size() == 1) {
    // Before the first step a program holds its parameters and whatever else
    // it built (interpreter, libraries, data): that part is fixed too.
    const double before = m.baseline_bytes ? std::max(0.0, *m.baseline_bytes - m.state.parameters) : 0.0;
    return MemoryModel(fit_memory_one_point(m.memory_points[0], m.state.total() + before), m.state, m.precision,
                       m.n_layer);
  }
  return MemoryModel(fit_memory(m.memory_points), m.state, m.precision, m.n_layer);
}

namespace {

struct Choice {
  int stage = 0;
  int degree = 1;
  MemoryBreakdown peak;
  bool fits = false;
};

// The compute part of a step, per phase (roofline()).
struct Roofline {
  double fwd_bwd_flops_s = 0, fwd_bwd_bytes = 0, fwd_bwd_memory_s = 0;
  double optimizer_bytes = 0, optimizer_s = 0;
  double seconds() const { return std::max(fwd_bwd_flops_s, fwd_bwd_memory_s) + optimizer_s; }
  json to_json() const {
    return {{"forward_backward",
             {{"flops_seconds", fwd_bwd_flops_s},
              {"bytes", fwd_bwd_bytes},
              {"memory_seconds", fwd_bwd_memory_s},
              {"bound", fwd_bwd_memory_s > fwd_bwd_flops_s ? "memory" : "compute"}}},
            {"optimizer", {{"bytes", optimizer_bytes}, {"memory_seconds", optimizer_s}, {"bound", "memory"}}}};
  }
};

json rocm_checklist(const config::Config& cfg, const Measured& m) {
  json c;
  json ops = json::array();
  std::string ops_note;
  if (m.program) {
    ops_note =
        "the program's own code (program.command): any custom op, extension or kernel it or its "
        "packages call needs a ROCm build; anchor does not inspect it: list them before renting";
  } else if (cfg.model.source == "torchscript") {
    ops_note = "model.source is torchscript (" + cfg.model.torchscript +
               "): any custom op or kernel the module calls needs a ROCm build; anchor does not "
               "inspect the module: list them before renting";
  } else {
    ops_note = "none: the built-in GPT (model.source " + cfg.model.source +
               ") uses stock ATen ops only; the config declares no custom ops or kernels";
  }
  c["custom_ops"] = ops;
  c["custom_ops_note"] = ops_note;
  const std::string ran = m.libtorch.empty() ? std::string("unknown") : m.libtorch;
  c["packages"] = json::array(
      {m.program
           ? "PyTorch 2.x built for ROCm (HIP), matching the node's ROCm release (the pilot ran torch " + ran + ")"
           : "LibTorch 2.x built for ROCm (HIP), matching the node's ROCm release (the pilot ran LibTorch " + ran + ")",
       "RCCL (ships with ROCm; ProcessGroupNCCL uses it under HIP) for multi-GPU",
       "amdgpu kernel driver and rocm-smi (device memory and health reports)",
       m.program ? "the program's Python packages built for ROCm where they ship native code"
                 : "anchor built against that LibTorch (ROCm exposes the GPU as device 'cuda' in LibTorch)"});
  if (m.program)
    c["exercised_by_pilot"] = json::array({"the program's forward, backward and optimizer step",
                                           "checkpoint save and restore through anchor_pilot "
                                           "(safetensors) with bitwise resume"});
  else
    c["exercised_by_pilot"] =
        json::array({"model forward and backward: embedding, layer norm, linear/matmul, causal softmax "
                     "attention, GELU, dropout, cross-entropy",
                     "AdamW step with global grad-norm clipping", "eval (forward only)",
                     "checkpoint save and restore (safetensors) with bitwise resume"});
  c["pilot_stages_passed"] = m.stages_passed;
  c["pilot_device"] = m.device;
  c["qualified"] = m.device == "rocm";
  c["status"] = m.device == "rocm" ? "the pilot ran on ROCm: these ops were exercised there"
                                   : "not qualified: the pilot ran on " + m.device +
                                         "; run `anchor pilot` on an MI300X node (device: rocm) with the same "
                                         "config before committing to it";
  return c;
}

// The devices to plan for: budget.devices, or all of the catalog.
std::vector<const Device*> devices_to_plan(const Catalog& catalog, const config::Config& cfg) {
  std::vector<const Device*> devices;
  if (cfg.budget.devices.empty()) {
    for (const auto& d : catalog.devices) devices.push_back(&d);
    return devices;
  }
  for (const auto& n : cfg.budget.devices) {
    const Device* d = catalog.find(n);
    if (!d) {
      std::string names;
      for (const auto& c : catalog.devices) names += (names.empty() ? "" : ", ") + c.name;
      throw Error(ErrorKind::kUsage, "budget.devices names '" + n + "', which is not in catalog " + catalog.path,
                  "the catalog has: " + names);
    }
    devices.push_back(d);
  }
  return devices;
}

// What the plan is for: the shape of one GPU's step and the long run's size.
struct Target {
  std::int64_t mb = 1, seq = 1;
  int ga = 1;
  Precision prec = Precision::kFp32;
  int nodes = 1, world = 1;
  double headroom = 0;
  double tokens_per_gpu_step = 0, fpt = 0;
  double run_tokens = 0, long_steps = 0, evals = 0;
  double config_global_batch = 0, planned_global_batch = 0;  // sequences per optimizer step
  double epochs = 0;                                         // passes over the training data; 0: its size is not known
  std::string run_length;
};

// What the plan changes without the config saying so, said: the long run on
// `world` GPUs at micro_batch x grad_accum each is another global batch (so
// other steps, another optimisation) than the config's; and a run that reads
// its training data many times over.
void notices(const Measured& m, Target& t, json& warnings) {
  if (t.config_global_batch > 0 && t.planned_global_batch != t.config_global_batch) {
    // What keeps the config's batch on W GPUs, in the long run's config: its
    // per-GPU share as micro_batch x grad_accum, the largest micro_batch up to
    // the measured one first.
    std::string keep = "no micro_batch x grad_accum on " + std::to_string(t.world) + " GPUs gives exactly " +
                       fixed(t.config_global_batch, 0) + " sequences";
    const double per_gpu = t.config_global_batch / t.world;
    if (per_gpu >= 1 && per_gpu == std::floor(per_gpu)) {
      const auto share = static_cast<std::int64_t>(per_gpu);
      for (std::int64_t mb = std::min<std::int64_t>(t.mb, share); mb >= 1; --mb)
        if (share % mb == 0) {
          keep = "the long run at micro_batch " + std::to_string(mb) + " x grad_accum " + std::to_string(share / mb) +
                 " per GPU keeps the config's batch";
          break;
        }
    }
    std::string steps;
    if (t.run_tokens > 0)
      steps = ": the same tokens in " + fixed(t.long_steps, 0) + " steps instead of " +
              fixed(std::ceil(t.run_tokens / (t.config_global_batch * static_cast<double>(t.seq))), 0) + ",";
    warnings.push_back("global batch: the long run on " + std::to_string(t.world) + " GPUs at micro_batch " +
                       std::to_string(t.mb) + " x grad_accum " + std::to_string(t.ga) + " takes " +
                       fixed(t.planned_global_batch, 0) + " sequences per optimizer step, not the config's " +
                       fixed(t.config_global_batch, 0) +
                       " (train.global_batch, else micro_batch x grad_accum x distributed.nproc_per_node)" + steps +
                       " and the learning rate and its schedule were not tuned for that batch; " + keep);
  }
  // The data's size: the pilot's windows at the pilot's seq_len (another data.seq_len here does not change it).
  const double data_tokens = m.train_sequences * static_cast<double>(m.seq_len > 0 ? m.seq_len : t.seq);
  if (data_tokens > 0 && t.run_tokens > 0) {
    t.epochs = t.run_tokens / data_tokens;
    if (t.epochs >= 2)
      warnings.push_back("data: the long run reads " + fixed(t.run_tokens, 0) + " tokens from training data of " +
                         fixed(data_tokens, 0) + " tokens (as the pilot read it): " + fixed(t.epochs, 1) +
                         " epochs, each sequence seen that many times; more data, or fewer tokens, if that is not "
                         "what you mean");
  }
}

Target target_of(const Measured& m, const config::Config& cfg, json& warnings) {
  Target t;
  // A program's shape is its own (anchor's train.* and data.* do not reach it).
  t.mb = m.program ? m.micro_batch : cfg.train.micro_batch;
  t.seq = m.program ? m.seq_len : cfg.data.seq_len;
  t.ga = m.program ? m.grad_accum : cfg.train.grad_accum;
  t.prec = m.program ? m.precision : parse_precision(cfg.train.precision);
  t.nodes = cfg.budget.nodes;
  t.world = cfg.budget.nodes * cfg.budget.gpus_per_node;
  t.headroom = cfg.budget.headroom;
  t.tokens_per_gpu_step = static_cast<double>(t.mb) * static_cast<double>(t.seq) * t.ga;
  t.fpt = m.n_layer > 0 && m.n_embd > 0 ? flops_per_token_at(m, static_cast<double>(t.seq)) : m.flops_per_token;
  const double global_seqs = cfg.train.global_batch > 0 && !m.program
                                 ? static_cast<double>(cfg.train.global_batch)
                                 : static_cast<double>(t.mb) * t.ga * cfg.distributed.nproc_per_node;
  if (cfg.train.total_tokens > 0) {
    t.run_tokens = static_cast<double>(cfg.train.total_tokens);
    t.run_length = "train.total_tokens " + std::to_string(cfg.train.total_tokens);
  } else if (cfg.train.total_steps > 0) {
    t.run_tokens = static_cast<double>(cfg.train.total_steps) * global_seqs * static_cast<double>(t.seq);
    t.run_length = "train.total_steps " + std::to_string(cfg.train.total_steps) + " x global batch " +
                   fixed(global_seqs, 0) + " x seq_len " + std::to_string(t.seq) + " tokens";
  } else {
    warnings.push_back(
        "train.total_steps and train.total_tokens are both 0: the training time of the long run "
        "is not planned (set one of them, e.g. --set train.total_tokens=...)");
  }
  t.long_steps = t.run_tokens > 0 ? std::ceil(t.run_tokens / (t.world * t.tokens_per_gpu_step)) : 0;
  const double config_steps = t.run_tokens > 0 ? t.run_tokens / (global_seqs * static_cast<double>(t.seq)) : 0;
  t.evals = cfg.budget.eval_every_steps > 0 ? std::floor(config_steps / cfg.budget.eval_every_steps) : 0;
  t.config_global_batch = m.program ? 0 : global_seqs;  // a program's batch is its own: not known here
  t.planned_global_batch = static_cast<double>(t.world) * static_cast<double>(t.mb) * t.ga;
  notices(m, t, warnings);
  return t;
}

json target_json(const Target& t, const config::Config& cfg) {
  return {{"micro_batch", t.mb},
          {"seq_len", t.seq},
          {"grad_accum", t.ga},
          {"precision", precision_name(t.prec)},
          {"nodes", t.nodes},
          {"gpus_per_node", cfg.budget.gpus_per_node},
          {"world_size", t.world},
          {"headroom", t.headroom},
          {"configured_strategy", cfg.distributed.strategy},
          {"run_tokens", t.run_tokens},
          {"run_length", t.run_length},
          {"long_run_steps", t.long_steps},
          {"global_batch", t.planned_global_batch},
          {"config_global_batch", t.config_global_batch > 0 ? json(t.config_global_batch) : json()},
          {"epochs", t.epochs > 0 ? json(t.epochs) : json()},
          {"tokens_per_gpu_step", t.tokens_per_gpu_step},
          {"flops_per_token", t.fpt}};
}

json measured_json(const Measured& m) {
  json j = {{"device", m.device},
            {"memory_source", m.memory_source},
            {"step_seconds", m.step_seconds},
            {"step_tokens", m.step_tokens},
            {"tokens_per_s", m.tokens_per_s},
            {"data_wait_s", m.data_wait_s},
            {"stall_percent", m.stall_percent},
            {"flops_per_token", m.flops_per_token},
            {"flops_source", m.flops_source},
            {"achieved_tflops", m.flops_per_token * m.tokens_per_s / 1e12},
            {"checkpoint_save_bytes", m.save_bytes},
            {"checkpoint_save_seconds", m.save_seconds},
            {"note", "measured by the pilot on " + m.device +
                         "; every other figure in this plan is an "
                         "estimate derived from these and the catalog"}};
  if (m.copy_off_seconds > 0) {
    j["copy_off_bytes"] = m.copy_off_bytes;
    j["copy_off_seconds"] = m.copy_off_seconds;
  }
  return j;
}

json memory_model_json(const Measured& m, const MemoryModel& mm, json& warnings) {
  const MemoryFit& fit = mm.fit();
  json points = json::array();
  for (std::size_t i = 0; i < m.memory_points.size(); ++i)
    points.push_back({{"micro_batch", m.memory_points[i].micro_batch},
                      {"seq_len", m.memory_points[i].seq_len},
                      {"measured_bytes", m.memory_points[i].peak_bytes},
                      {"fitted_bytes", fit.predicted[i]},
                      {"residual_bytes", fit.residual[i]}});
  if (!fit.note.empty()) warnings.push_back("memory model: " + fit.note);
  if (fit.per_token < 0 || fit.per_token_seq < 0)
    warnings.push_back(
        "memory model: a fitted activation coefficient is negative (noisy points?); "
        "predictions far from the measured points are unreliable");
  return {
      {"formula", fit.quadratic ? "peak = fixed + a*(mb*T) + b*(mb*T*T)" : "peak = fixed + a*(mb*T)  (linear model)"},
      {"quadratic", fit.quadratic},
      {"note", fit.note},
      {"points_measured", m.memory_points.size()},
      {"fixed_bytes", fit.fixed},
      {"a_bytes_per_token", fit.per_token},
      {"b_bytes_per_token_per_seq", fit.per_token_seq},
      {"measured_precision", precision_name(m.precision)},
      {"state_bytes",
       {{"parameters", mm.state().parameters},
        {"gradients", mm.state().gradients},
        {"optimizer", mm.state().optimizer},
        {"total", mm.state().total()}}},
      {"other_fixed_bytes", mm.other_fixed()},
      {"points", points},
      {"max_relative_residual", fit.max_relative_residual}};
}

// The first stage and degree that fits (replicated first), or the most sharded tried.
struct Sharding {
  Choice chosen, shown;
  json considered = json::array();
};

Sharding choose_sharding(const MemoryModel& mm, const Target& t, double capacity) {
  Sharding s;
  auto try_option = [&](int stage, int degree) {
    Choice c;
    c.stage = stage;
    c.degree = degree;
    c.peak = mm.predict({t.mb, t.seq, t.prec, stage, degree});
    c.fits = c.peak.total <= capacity;
    s.considered.push_back({{"strategy", strategy_name(stage, t.world)},
                            {"sharding_degree", degree},
                            {"predicted_peak_bytes", c.peak.total},
                            {"fits", c.fits}});
    return c;
  };
  s.chosen = try_option(0, 1);
  Choice last = s.chosen;
  if (!s.chosen.fits && t.world > 1) {
    for (int stage = 1; stage <= 3 && !s.chosen.fits; ++stage)
      for (int deg : divisors_from_2(t.world)) {
        last = try_option(stage, deg);
        if (last.fits) {
          s.chosen = last;
          break;
        }
      }
  }
  s.shown = s.chosen.fits ? s.chosen : last;
  return s;
}

std::string decision_text(const Sharding& s, const Device& d, const Target& t, double capacity) {
  const Choice& c = s.chosen;
  if (c.fits && c.stage == 0)
    return "replicated state + activations " + fixed(gib(c.peak.total), 2) + " GiB <= " + fixed(gib(capacity), 2) +
           " GiB usable (" + fixed(100 * (1 - t.headroom), 0) + "% of " + fixed(d.memory_gb, 0) + " GB)";
  if (c.fits)
    return "replicated (DDP) needs " + fixed(gib(s.considered[0]["predicted_peak_bytes"].get<double>()), 2) +
           " GiB > " + fixed(gib(capacity), 2) + " GiB usable; " + strategy_name(c.stage, t.world) + " over " +
           std::to_string(c.degree) + " ranks needs " + fixed(gib(c.peak.total), 2) +
           " GiB, the first stage and degree that fits";
  return "does not fit: even " + std::string(strategy_name(s.shown.stage, t.world)) + " over " +
         std::to_string(s.shown.degree) + " ranks needs " + fixed(gib(s.shown.peak.total), 2) + " GiB > " +
         fixed(gib(capacity), 2) + " GiB usable; lower the micro-batch, use activation checkpointing, or add GPUs";
}

// The step's compute on device `d` as a roofline, per phase the slower of
// its FLOPs at peak x MFU and the bytes it moves at the memory bandwidth x
// kAssumedMemoryEfficiency (docs/plan.md, "Step time"):
//   forward and backward, each micro-step: the weights read three times (in
//     the compute precision: forward, backward for the inputs, for the
//     weights) and the gradients read and written once (accumulated);
//   the optimizer step: the optimizer state and the weights read and written,
//     the gradients read; a ZeRO stage >= 1 updates its shard only.
// Activations' traffic is not counted (nor are kernel launch gaps): MFU stands
// for what the model does not see.
Roofline roofline(const Device& d, const StateBytes& state, const Target& t, const Choice& c, double peak_flops) {
  Roofline r;
  const double bandwidth = d.memory_bandwidth_tbps * 1e12 * kAssumedMemoryEfficiency;
  const double weights = t.prec == Precision::kFp32 ? state.parameters : state.parameters / 2.0;
  const double shard = c.stage >= 1 ? static_cast<double>(c.degree) : 1.0;
  r.fwd_bwd_flops_s = t.tokens_per_gpu_step * t.fpt / (peak_flops * kAssumedMfu);
  r.fwd_bwd_bytes = t.ga * (3.0 * weights + 2.0 * state.gradients);
  r.fwd_bwd_memory_s = r.fwd_bwd_bytes / bandwidth;
  r.optimizer_bytes = (2.0 * state.optimizer + state.gradients + 2.0 * state.parameters) / shard;
  r.optimizer_s = r.optimizer_bytes / bandwidth;
  return r;
}

// The collectives of one step (docs/plan.md, "Communication"): the bytes each
// rank sends (comm_bytes_per_step: the bus factor is in them) at the bus
// bandwidth of the slowest link they cross (the node's all-reduce bus
// bandwidth; across nodes the network's per GPU), in DDP-sized buckets of
// kBucketBytes, each paying the latency of its algorithm's steps (the fewer
// of a ring's 2(W-1) and a tree's 2 ceil(log2 W)). DDP and ZeRO-1/2 reduce
// the last micro-step's gradients during its backward (2/3 of its compute);
// ZeRO-3 prefetches its gathers through the whole forward and backward. The
// last bucket is never hidden.
struct Communication {
  double bytes = 0, busbw = 0, latency_s = 0, messages = 0, steps_per_message = 0;
  double total_s = 0, window_s = 0, exposed_s = 0;
  std::string link;
  json to_json() const {
    return {{"bytes", bytes},
            {"link", link},
            {"bus_bandwidth_bytes_per_s", busbw},
            {"latency_s_per_step", latency_s},
            {"messages", messages},
            {"latency_steps_per_message", steps_per_message},
            {"total_seconds", total_s},
            {"overlap_window_seconds", window_s},
            {"exposed_seconds", exposed_s}};
  }
};
constexpr double kBucketBytes = 25.0 * 1024 * 1024;  // DDP's bucket_cap_mb default

Communication communication(const Device& d, const Target& t, const Choice& c, double bytes, const Roofline& roof) {
  Communication k;
  k.bytes = bytes;
  if (t.world < 2 || bytes <= 0) return k;
  const double intra = d.allreduce_busbw_gbps > 0 ? d.allreduce_busbw_gbps : Device::kBusBwOfLink * d.interconnect_gbps;
  const bool across = t.nodes > 1 && d.network_gbps > 0;
  k.busbw = (across ? std::min(intra, d.network_gbps) : intra) * 1e9;
  k.link = across ? d.interconnect + " inside a node, " + d.network + " between nodes" : d.interconnect;
  k.latency_s = (across ? (d.network_latency_us > 0 ? d.network_latency_us : Device::kNetworkLatencyUs)
                        : (d.interconnect_latency_us > 0 ? d.interconnect_latency_us : Device::kIntraLatencyUs)) *
                1e-6;
  k.messages = std::max(1.0, std::ceil(bytes / kBucketBytes));
  k.steps_per_message = std::min(2.0 * (t.world - 1), 2.0 * std::ceil(std::log2(static_cast<double>(t.world))));
  k.total_s = bytes / k.busbw + k.messages * k.steps_per_message * k.latency_s;
  const double fwd_bwd = std::max(roof.fwd_bwd_flops_s, roof.fwd_bwd_memory_s);
  k.window_s = c.stage == 3 ? fwd_bwd : fwd_bwd * (2.0 / 3.0) / std::max(1, t.ga);
  k.exposed_s = std::max(k.total_s - k.window_s, k.total_s / k.messages);
  return k;
}

// What the budget of the whole run on device `d` takes: the step's parts
// (compute + communication, data wait, in seconds) and the run's figures.
BudgetInput budget_input(const Device& d, const Measured& m, const Target& t, const config::Config& cfg,
                         double peak_flops, double compute_comm_s, double data_s) {
  BudgetInput bi;
  bi.world = t.world;
  bi.nodes = t.nodes;
  bi.steps = t.long_steps;
  bi.compute_s_per_step = compute_comm_s;
  bi.data_wait_s_per_step = data_s;
  bi.evals = t.evals;
  const double eval_tokens =
      static_cast<double>(cfg.pilot.eval_batches) * static_cast<double>(t.mb) * static_cast<double>(t.seq);
  bi.eval_s = eval_tokens * t.fpt / 3.0 / (t.world * peak_flops * kAssumedMfu);
  bi.save_s = m.save_seconds;
  bi.checkpoint_bytes = m.save_bytes;
  bi.failures_per_day = cfg.budget.failures_per_day;
  bi.restart_minutes = cfg.budget.restart_minutes;
  bi.download_gb = cfg.budget.download_gb;
  bi.ingress_gbps = cfg.budget.ingress_gbps;
  bi.preprocess_hours = cfg.budget.preprocess_hours;
  bi.export_gb = cfg.budget.export_gb;
  bi.egress_gbps = cfg.budget.egress_gbps;
  if (m.copy_off_bytes > 0 && m.copy_off_seconds > 0)
    bi.egress_measured_gbps = m.copy_off_bytes * 8.0 / 1e9 / m.copy_off_seconds;
  if (m.download_bytes > 0 && m.download_seconds > 0) {
    bi.download_measured_bytes_per_s = m.download_bytes / m.download_seconds;
    bi.download_sample_bytes = m.download_bytes;
  }
  if (m.preprocess_bytes > 0 && m.preprocess_seconds > 0) {
    bi.preprocess_measured_bytes_per_s = m.preprocess_bytes / m.preprocess_seconds;
    bi.preprocess_sample_bytes = m.preprocess_bytes;
  }
  bi.margin = cfg.budget.margin;
  bi.price_on_demand = d.price_on_demand;
  bi.price_7_day = d.price_7_day;
  bi.price_30_day = d.price_30_day;
  bi.work_estimated = t.long_steps > 0;
  return bi;
}

// One device: fit and sharding, the projected step (an estimate), and the
// budget of the whole run on it (returned in `budget`).
json evaluate_device(const Device& d, const Measured& m, const MemoryModel& mm, const Target& t,
                     const config::Config& cfg, json& budget) {
  const double capacity = d.memory_bytes() * (1.0 - t.headroom);
  const Sharding s = choose_sharding(mm, t, capacity);
  const bool fits = s.chosen.fits;
  json dj;
  dj["name"] = d.name;
  dj["platform"] = d.platform;
  dj["gpus"] = t.world;
  dj["nodes"] = t.nodes;
  dj["memory_bytes"] = d.memory_bytes();
  dj["usable_bytes"] = capacity;
  dj["fits"] = fits;
  dj["strategy"] = fits ? strategy_name(s.chosen.stage, t.world) : "none";
  dj["zero_stage"] = s.shown.stage;
  dj["sharding_degree"] = s.shown.degree;
  dj["predicted_peak_bytes"] = s.shown.peak.total;
  dj["predicted_peak"] = breakdown_json(s.shown.peak);
  dj["considered"] = s.considered;
  const auto maxmb = mm.max_micro_batch({t.mb, t.seq, t.prec, s.shown.stage, s.shown.degree}, capacity);
  dj["max_micro_batch"] = maxmb ? json(*maxmb) : json(nullptr);
  dj["decision"] = decision_text(s, d, t, capacity);

  // Step time (estimate).
  const double peak_flops = d.bf16_tflops * 1e12 * (t.prec == Precision::kFp32 ? 0.5 : 1.0);
  const Roofline roof = roofline(d, mm.state(), t, s.shown, peak_flops);
  const double compute_s = roof.seconds();
  dj["roofline"] = roof.to_json();
  const double comm_bytes =
      t.world > 1 ? comm_bytes_per_step(s.shown.stage, t.world, s.shown.degree, mm.state().gradients, t.ga) : 0.0;
  const Communication comm = communication(d, t, s.shown, comm_bytes, roof);
  const double comm_s = comm.exposed_s;
  dj["communication"] = comm.to_json();
  const double data_s = m.data_wait_s * t.tokens_per_gpu_step / m.step_tokens;
  // The node's storage feeds every GPU on it: past the preflight's measured
  // read rate (tokens/s per node), the step waits for input however fast it computes.
  const double per_node = static_cast<double>(t.world) / std::max(1, t.nodes);
  const double input_s =
      m.node_input_tokens_per_s > 0 ? per_node * t.tokens_per_gpu_step / m.node_input_tokens_per_s : 0.0;
  const bool input_bound = input_s > compute_s + comm_s + data_s;
  const double step_s = input_bound ? input_s : compute_s + comm_s + data_s;
  dj["input_seconds_per_step"] = input_s;
  dj["input_bound"] = input_bound;
  dj["comm_bytes_per_step"] = comm_bytes;
  dj["comm_seconds_per_step"] = comm_s;
  dj["compute_seconds_per_step"] = compute_s;
  dj["data_wait_seconds_per_step"] = data_s;
  dj["projected_step_seconds"] = step_s;
  dj["projected_tokens_per_s"] = t.world * t.tokens_per_gpu_step / step_s;
  dj["step_time_is"] = "ESTIMATE: per phase the slower of FLOPs / (peak x MFU " + fixed(kAssumedMfu, 2) +
                       ") and bytes / (memory bandwidth x " + fixed(kAssumedMemoryEfficiency, 2) +
                       "), + the communication not hidden behind the backward pass + measured data wait";

  // Budget for the whole run on this device.
  budget = make_budget(budget_input(d, m, t, cfg, peak_flops, compute_s + comm_s, data_s));
  budget["device"] = d.name;
  budget["currency"] = d.currency;
  budget["prices_are"] = "EXAMPLES from the catalog unless you edited them";
  dj["days"] = budget["days"];
  dj["term"] = budget["term"];
  dj["cost_7_day"] = budget["cost_7_day"];
  dj["cost_30_day"] = budget["cost_30_day"];
  const doc::Budget paid = doc::budget_from_json(budget);
  dj["cost_on_demand"] = paid.cost_on_demand ? json(*paid.cost_on_demand) : json(nullptr);
  dj["pricing"] = paid.pricing.value_or("");
  dj["cost"] = paid.cost.value_or(0.0);
  json prices = {{"term_7_day", d.price_7_day}, {"term_30_day", d.price_30_day}};
  if (d.price_on_demand > 0) prices["on_demand"] = d.price_on_demand;
  dj["price_per_gpu_hour"] = prices;
  if (d.platform == "rocm") dj["rocm_qualification"] = rocm_checklist(cfg, m);
  return dj;
}

// ---------------------------------------------------------------------------
// How many GPUs (docs/plan.md, "How many GPUs").

// The counts searched: 1, 2, 4, ... below a node, then whole nodes doubling,
// and budget.nodes x gpus_per_node itself.
std::vector<int> gpu_counts(const config::Config& cfg) {
  const int per_node = cfg.budget.gpus_per_node, most = cfg.budget.nodes * per_node;
  std::vector<int> out;
  if (!cfg.budget.search_gpu_count) return {most};
  for (int w = 1; w < per_node && w < most; w *= 2) out.push_back(w);
  for (int w = per_node; w < most; w *= 2) out.push_back(w);
  out.push_back(most);
  return out;
}

// cfg with the long run on `gpus` GPUs: one node below a node's worth, else whole nodes.
config::Config with_gpus(const config::Config& cfg, int gpus) {
  config::Config c = cfg;
  if (gpus == cfg.budget.nodes * cfg.budget.gpus_per_node) return c;
  c.budget.gpus_per_node = std::min(gpus, cfg.budget.gpus_per_node);
  c.budget.nodes = std::max(1, gpus / cfg.budget.gpus_per_node);
  return c;
}

// One device at every count searched: the scaling curve (step, tokens/s,
// efficiency against the smallest count that fits, the communication's share
// of the step, days, cost), the knee where efficiency falls below
// budget.min_scaling_efficiency with its cause, and the count to plan: the
// cheapest that ends within budget.deadline_days, else the soonest done.
// Returns that count's device entry (with "scaling") and sets its budget.
json scaling(const Device& d, const Measured& m, const MemoryModel& mm, const config::Config& cfg, json& budget) {
  json rows = json::array(), knee;
  std::vector<json> entries, budgets;
  std::optional<std::size_t> chosen, base;
  // The chosen count's deadline, days and cost: one that meets the deadline
  // beats one that does not; then the cheaper, or when none meets it, the
  // sooner done. Ties keep the fewer GPUs, searched first.
  struct Pick {
    bool meets = false;
    double days = 0, cost = 0;
    bool better_than(const Pick& o) const {
      if (meets != o.meets) return meets;
      return meets ? cost < o.cost : days < o.days;
    }
  } pick;
  double base_rate = 0;
  for (const int gpus : gpu_counts(cfg)) {
    const config::Config c = with_gpus(cfg, gpus);
    json scratch = json::array(), b;
    const Target t = target_of(m, c, scratch);
    json dj = evaluate_device(d, m, mm, t, c, b);
    const doc::Device dv = doc::device_from_json(dj);
    const doc::Budget bv = doc::budget_from_json(b);
    const bool fits = dv.fits.value_or(false);
    const double step = dv.projected_step_seconds.value_or(0.0), rate = dv.projected_tokens_per_s.value_or(0.0);
    if (fits && !base) {
      base = entries.size();
      base_rate = rate / gpus;
    }
    const double efficiency = fits && base_rate > 0 ? rate / gpus / base_rate : 0.0;
    const double comm_share = step > 0 ? dv.comm_seconds_per_step.value_or(0.0) / step : 0.0;
    const bool meets = t.long_steps <= 0 || bv.days.value_or(0.0) <= cfg.budget.deadline_days;
    dj["meets_deadline"] = meets;
    rows.push_back({{"gpus", gpus},
                    {"nodes", t.nodes},
                    {"fits", fits},
                    {"strategy", dv.strategy.value_or("")},
                    {"step_seconds", step},
                    {"tokens_per_s", rate},
                    {"scaling_efficiency", efficiency},
                    {"communication_share", comm_share},
                    {"input_bound", dv.input_bound.value_or(false)},
                    {"days", bv.days.value_or(0.0)},
                    {"cost", bv.cost.value_or(0.0)},
                    {"pricing", bv.pricing.value_or("")},
                    {"meets_deadline", meets}});
    const int per_node = gpus / std::max(1, t.nodes);
    if (fits && knee.is_null() && efficiency < cfg.budget.min_scaling_efficiency)
      knee = {{"gpus", gpus},
              {"scaling_efficiency", efficiency},
              {"cause",
               dv.input_bound.value_or(false)
                   ? "input: the node's storage, read at the preflight's measured " +
                         fixed(m.node_input_tokens_per_s / 1e6, 2) + " M tokens/s, feeds " + std::to_string(per_node) +
                         " GPUs a node at most " + fixed(m.node_input_tokens_per_s / per_node / 1e6, 2) +
                         " M tokens/s each, less than they compute"
               : comm_share >= 0.1
                   ? "communication: " + fixed(comm_share * 100, 0) + "% of the step at " + std::to_string(gpus) +
                         " GPUs is communication the backward pass "
                         "does not hide (" +
                         dv.strategy.value_or("") + ")"
                   : "the step's other parts: data wait and the optimizer step do not shrink "
                     "with more GPUs"}};
    const Pick here{meets, bv.days.value_or(0.0), bv.cost.value_or(0.0)};
    if (fits && (!chosen || here.better_than(pick))) {
      chosen = entries.size();
      pick = here;
    }
    entries.push_back(std::move(dj));
    budgets.push_back(std::move(b));
  }
  const std::size_t at = chosen.value_or(entries.size() - 1);  // none fits: the largest count, as shown
  json out = entries[at];
  out["scaling"] = {{"min_scaling_efficiency", cfg.budget.min_scaling_efficiency},
                    {"deadline_days", cfg.budget.deadline_days},
                    {"curve", rows},
                    {"knee", knee}};
  budget = budgets[at];
  return out;
}

// The two choices the seeds ask to be argued with the run's own numbers, on
// the recommended device at its count (DataParallel at 2 GPUs at least, and
// inside one node, the only place it runs): DataParallel against DDP, and
// DDP against FSDP (ZeRO-3). docs/plan.md, "Advice".
json advice(const Device& d, const MemoryModel& mm, const Target& t, int per_node) {
  json out = json::array();
  const StateBytes& st = mm.state();
  const double busbw =
      (d.allreduce_busbw_gbps > 0 ? d.allreduce_busbw_gbps : Device::kBusBwOfLink * d.interconnect_gbps) * 1e9;
  const int dp = std::min(std::max(2, t.world), std::max(2, per_node));
  // DataParallel: one process; every step GPU 0 copies the weights to the
  // others and sums their gradients, (dp-1) x (P + G) through its own link,
  // under one Python interpreter. DDP: dp processes, the buckets' all-reduce.
  const double dp_s = (dp - 1) * (st.parameters + st.gradients) / busbw;
  const double ddp_s = comm_bytes_per_step(0, dp, dp, st.gradients, 1) / busbw;
  out.push_back("DDP, one process per GPU, not torch.nn.DataParallel: at " + std::to_string(dp) + " x " + d.name +
                " DataParallel's one process would copy the weights out of GPU 0 and sum the gradients back into it, " +
                fixed((dp - 1) * (st.parameters + st.gradients) / 1e9, 2) + " GB through one link (" +
                fixed(dp_s * 1e3, 2) + " ms) every step, serialised by one Python interpreter; DDP all-reduces " +
                fixed(comm_bytes_per_step(0, dp, dp, st.gradients, 1) / 1e9, 2) + " GB per GPU in buckets (" +
                fixed(ddp_s * 1e3, 2) + " ms), mostly behind the backward pass");
  if (t.world < 2) return out;
  const double capacity = d.memory_bytes() * (1.0 - t.headroom);
  const double ddp_peak = mm.predict({t.mb, t.seq, t.prec, 0, 1}).total;
  const double fsdp_peak = mm.predict({t.mb, t.seq, t.prec, 3, t.world}).total;
  const double ddp_bytes = comm_bytes_per_step(0, t.world, t.world, st.gradients, t.ga);
  const double fsdp_bytes = comm_bytes_per_step(3, t.world, t.world, st.gradients, t.ga);
  out.push_back(std::string(ddp_peak <= capacity ? "DDP" : "FSDP (ZeRO-3)") + " at " + std::to_string(t.world) +
                " GPUs: DDP keeps a whole replica, " + fixed(gib(ddp_peak), 2) + " GiB per GPU against " +
                fixed(gib(capacity), 2) + " GiB usable" + (ddp_peak <= capacity ? " (it fits)" : " (it does not fit)") +
                "; FSDP shards it to " + fixed(gib(fsdp_peak), 2) + " GiB but moves " + fixed(fsdp_bytes / 1e9, 2) +
                " GB per GPU per step against DDP's " + fixed(ddp_bytes / 1e9, 2) +
                " GB: shard only what does not fit (the plan tries ZeRO-1 and ZeRO-2 first)");
  return out;
}

// What the preflight measured of the node, as the plan uses it
// (docs/plan.md, "The node"): the storage's input rate, which caps the
// tokens a node's GPUs get (input_seconds_per_step), and the all-reduce's
// latency and bus bandwidth, with which the communication model predicts the
// pilot's own DDP all-reduce: the check against what its ranks measured.
json node_json(const Measured& m, const config::Config& cfg) {
  json out = json::object();
  if (m.node_input_tokens_per_s > 0)
    out["input"] = {{"tokens_per_s_per_node", m.node_input_tokens_per_s},
                    {"read_mb_per_s", m.node_read_mb_per_s},
                    {"basis",
                     "MEASURED: the preflight's read of data.train from storage (page cache dropped), in the "
                     "loader's tokens; a dataset the page cache holds reads faster after its first epoch"}};
  if (m.allreduce_ranks > 1) {
    json ar = {{"ranks", m.allreduce_ranks},
               {"backend", m.allreduce_backend},
               {"latency_s", m.allreduce_latency_s},
               {"bus_bandwidth_bytes_per_s", m.allreduce_busbw},
               {"basis", "MEASURED: the preflight's all-reduce over the pilot's ranks on this node"}};
    // The model: each bucket a message paying the measured latency, the
    // bytes (the bus factor in them) at the measured bus bandwidth.
    if (m.world_size == m.allreduce_ranks && m.strategy == "ddp" && m.comm_s_min > 0 && m.state.gradients > 0) {
      const double bucket = cfg.distributed.bucket_mb * 1024 * 1024;
      const double messages = std::max(1.0, std::ceil(m.state.gradients / bucket));
      const double bytes = comm_bytes_per_step(0, m.world_size, m.world_size, m.state.gradients, 1);
      const double predicted = messages * m.allreduce_latency_s + bytes / m.allreduce_busbw;
      ar["check"] = {{"world", m.world_size},
                     {"gradient_bytes", m.state.gradients},
                     {"messages", messages},
                     {"predicted_comm_s", predicted},
                     {"measured_comm_s", m.comm_s_min},
                     {"measured_over_predicted", m.comm_s_min / predicted},
                     {"what",
                      "the pilot's DDP all-reduce of its gradients, predicted as messages x latency + bytes x "
                      "2(n-1)/n / bus bandwidth, against the step's comm_s at the rank that spent least in it "
                      "(the others also waited for it); what is measured also flattens and copies the buckets"}};
    }
    out["all_reduce"] = std::move(ar);
  }
  return out;
}

// The whole run on the device the pilot ran on, at the rate it measured on
// one process, margin included: a job that needs no accelerator says so.
json piloted_device(const Measured& m, const Target& t, const config::Config& cfg) {
  if (t.run_tokens <= 0 || m.tokens_per_s <= 0) return nullptr;
  const double days = t.run_tokens / m.tokens_per_s / kSecondsPerDay * (1.0 + cfg.budget.margin);
  return {{"device", m.device},
          {"days", days},
          {"within_deadline", days <= cfg.budget.deadline_days},
          {"basis",
           "MEASURED: the run's tokens at the pilot's tokens/s on one process, + budget.margin; "
           "no checkpoints, eval or restarts counted"}};
}

// The recommendation of the device, at its GPU count, that recommend() chose.
void recommend_best(const doc::Device& bd, const doc::Budget& b, const json& budget, std::int64_t micro_batch,
                    json& out) {
  const std::string cheaper = b.cheaper_term.value_or(""), pricing = b.pricing.value_or("");
  json rec = {{"device", bd.name.value_or("")},
              {"strategy", bd.strategy.value_or("")},
              {"sharding_degree", bd.sharding_degree.value_or(1)},
              {"gpus", bd.gpus.value_or(1)},
              {"nodes", bd.nodes.value_or(1)},
              {"micro_batch", micro_batch},
              {"max_micro_batch", bd.max_micro_batch ? json(*bd.max_micro_batch) : json()},
              {"projected_step_seconds", bd.projected_step_seconds.value_or(0.0)},
              {"days", b.days.value_or(0.0)},
              {"term", b.term.value_or("")},
              {"cost", b.cost.value_or(0.0)},
              {"cheaper_term", cheaper},
              {"pricing", pricing},
              {"why", "the fitting device with the lowest cost for the whole run (" +
                          (pricing == "on-demand" ? pricing : pricing + " terms") +
                          ", example prices) at its cheapest GPU count that ends within budget.deadline_days; "
                          "ties go to the lower cost per token"}};
  if (!bd.meets_deadline.value_or(true))
    rec["why"] =
        "no device ends the run within budget.deadline_days at any GPU count searched: the one that "
        "ends soonest; raise budget.nodes, or the deadline";
  out["recommendation"] = rec;
  out["budget"] = budget;
}

// Among the devices (each at the GPU count scaling() chose for it) that fit:
// one that ends within the deadline before one that does not; among those
// that do, the lowest cost for the whole run, ties to the lower cost per
// token; among those that do not, the soonest done. Sets
// out["recommendation"] and out["budget"].
void recommend(const std::vector<const Device*>& devices, const json& devs, const std::vector<json>& budgets,
               const Target& t, json& out) {
  std::optional<std::size_t> best;
  std::vector<doc::Device> evaluated;
  std::vector<doc::Budget> costs;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    evaluated.push_back(doc::device_from_json(devs[i]));
    costs.push_back(doc::budget_from_json(budgets[i]));
  }
  const auto per_token = [&](std::size_t i) {
    return devices[i]->price_30_day * static_cast<double>(evaluated[i].gpus.value_or(1)) /
           evaluated[i].projected_tokens_per_s.value_or(0.0);
  };
  const auto better = [&](std::size_t i, std::size_t j) {
    const bool mi = evaluated[i].meets_deadline.value_or(true), mj = evaluated[j].meets_deadline.value_or(true);
    if (mi != mj) return mi;
    if (!mi) return costs[i].days.value_or(0.0) < costs[j].days.value_or(0.0);
    const double ci = costs[i].cost.value_or(0.0), cj = costs[j].cost.value_or(0.0);
    return ci < cj || (ci == cj && per_token(i) < per_token(j));
  };
  for (std::size_t i = 0; i < evaluated.size(); ++i)
    if (evaluated[i].fits.value_or(false) && (!best || better(i, *best))) best = i;
  if (!best) {
    out["recommendation"] = {
        {"device", nullptr},
        {"why", "no catalog device fits the target even fully sharded (ZeRO-3 over all " + std::to_string(t.world) +
                    " GPUs); lower the micro-batch or the sequence length, "
                    "use activation checkpointing, or plan more GPUs (budget.nodes)"}};
    out["budget"] = nullptr;
    return;
  }
  recommend_best(evaluated[*best], costs[*best], budgets[*best], t.mb, out);
}

// Assumptions, stated with the numbers they use.
json assumptions_of(const Measured& m, const Target& t, const std::vector<const Device*>& devices) {
  json a = json::array();
  a.push_back(
      "MEASURED: step time, tokens/s, data wait, peak memory points, state bytes "
      "and checkpoint save time come from the pilot on " +
      m.device + " (memory source: " + m.memory_source + ")");
  if (m.program)
    a.push_back("the program's shape: micro_batch " + std::to_string(t.mb) + ", seq_len " + std::to_string(t.seq) +
                ", grad_accum " + std::to_string(t.ga) + ", precision " + precision_name(t.prec) +
                " as it reported them (anchor_pilot.shape); FLOPs per token: " + m.flops_source);
  a.push_back(
      "ESTIMATE: projected step time = tokens per GPU step x FLOPs per token / "
      "(catalog peak x assumed MFU " +
      fixed(kAssumedMfu, 2) +
      "); the pilot's own step time is not scaled (its device is not in the "
      "catalog); the measured device reached " +
      fixed(m.flops_per_token * m.tokens_per_s / 1e12, 4) + " TFLOP/s");
  if (m.n_layer > 0 && m.n_embd > 0)
    a.push_back(
        "FLOPs per token at seq_len T = measured flops_per_token + 12 x n_layer x "
        "n_embd x (T - measured T) (the attention term)");
  if (t.prec == Precision::kFp32)
    a.push_back(
        "precision fp32: peak taken as half the catalog's dense bf16 figure "
        "(TF32 tensor-core rate on A100/H100/H200/MI300X)");
  if (t.prec != m.precision)
    a.push_back(std::string("precision ") + precision_name(t.prec) + " vs measured " + precision_name(m.precision) +
                ": activations scale by " +
                fixed(activation_element_bytes(t.prec) / activation_element_bytes(m.precision), 2) +
                " (element size); fp32 master weights, fp32 gradients and the optimizer state are unchanged");
  if (t.prec != Precision::kFp32)
    a.push_back("autocast " + std::string(precision_name(t.prec)) +
                " keeps a 2-byte copy of every fp32 weight during the step: + parameters/2 bytes (cast_weights)");
  a.push_back(
      "sharding: ZeRO-1 divides optimizer state by the degree, ZeRO-2 also "
      "gradients, ZeRO-3/FSDP also parameters (+ one layer's gathered "
      "parameters, parameters / n_layer); the other fixed part is not sharded");
  if (m.n_layer < 1)
    a.push_back(
        "n_layer unknown (the program did not give it to anchor_pilot.shape): the ZeRO-3 gather buffer is "
        "taken as all the parameters, a pessimistic bound");
  a.push_back("device memory: catalog memory_gb x 10^9 bytes, of which budget.headroom " + fixed(t.headroom, 2) +
              " is kept free (CUDA/HIP context, fragmentation)");
  a.push_back(
      "communication: the collectives' bytes at the node's all-reduce bus bandwidth (the catalog's published "
      "figure, else 0.4 x its link's), across nodes the network's per GPU when slower, in 25 MiB buckets each "
      "paying the latency of the fewer of a ring's and a tree's steps; hidden behind the last micro-step's "
      "backward (ZeRO-3: the whole forward and backward) except the last bucket");
  if (t.nodes > 1)
    for (const auto* d : devices)
      if (d->network_gbps <= 0)
        a.push_back("nodes > 1: the catalog gives " + d->name +
                    " no network between nodes; its communication uses the intra-node bus bandwidth and is "
                    "OPTIMISTIC");
  a.push_back("data-parallel scaling: the long run processes " +
              (t.run_length.empty() ? std::string("0 tokens") : t.run_length) + " over " + std::to_string(t.world) +
              " GPUs (budget.nodes x budget.gpus_per_node), each at the configured micro_batch x grad_accum; "
              "ideal scaling apart from the communication above");
  a.push_back(
      "data wait per step = measured data wait per token x tokens per GPU step "
      "(the target node's loader assumed as fast as the pilot's)");
  a.push_back("checkpoints: measured save time of the full state (" + fixed(m.save_bytes / 1e6, 3) + " MB in " +
              fixed(m.save_seconds, 3) +
              " s) on the target's storage; interval sqrt(2 x save_s x MTBF), MTBF = "
              "1 day / (budget.failures_per_day x budget.nodes); each restart costs "
              "budget.restart_minutes + half an interval of lost work");
  a.push_back(
      m.copy_off_seconds > 0
          ? "copies off the node (budget.export_gb, the final checkpoint) at the pilot's measured copy_off rate (" +
                fixed(m.copy_off_bytes / 1e6, 3) + " MB in " + fixed(m.copy_off_seconds, 3) +
                " s to export.copy_to, written, fsynced and read back): the long run's copies go there too"
          : std::string("copies off the node (budget.export_gb, the final checkpoint) at budget.egress_gbps, "
                        "assumed: set export.copy_to to measure it"));
  a.push_back(
      "eval: pilot.eval_batches x micro_batch x seq_len tokens forward-only "
      "(1/3 of training FLOPs) every budget.eval_every_steps configured steps");
  a.push_back(
      "prices: the catalog's EXAMPLE per-GPU-hour prices; a term is paid in "
      "full (7 x 24 or 30 x 24 hours per GPU per term)");
  return a;
}

}  // namespace

nlohmann::json make_plan(const Measured& m, const Catalog& catalog, const config::Config& cfg) {
  const MemoryModel mm = memory_model(m);
  const std::vector<const Device*> devices = devices_to_plan(catalog, cfg);
  json warnings = json::array();
  json at_most = json::array();  // the budget's maximum: its warnings are those of the count recommended
  const Target t = target_of(m, cfg, at_most);

  // The model the figures were measured on must be the one planned for.
  if (!m.program && (m.n_layer != cfg.model.n_layer || m.n_embd != cfg.model.n_embd ||
                     m.n_head.value_or(cfg.model.n_head) != cfg.model.n_head ||
                     m.vocab_size.value_or(cfg.model.vocab_size) != cfg.model.vocab_size))
    warnings.push_back(
        "model.* differs from the measured model (measurements.model): the memory model and "
        "FLOPs are those of the MEASURED model; pilot the new model to plan it");

  json out;
  out["format"] = "anchor.plan/v1";
  out["measured"] = measured_json(m);
  out["memory_model"] = memory_model_json(m, mm, warnings);

  json devs = json::array();
  std::vector<json> budgets;
  for (const Device* d : devices) {
    json budget;
    devs.push_back(scaling(*d, m, mm, cfg, budget));
    budgets.push_back(std::move(budget));
  }
  out["devices"] = devs;
  recommend(devices, devs, budgets, t, out);
  // The target, its warnings and assumptions at the count recommended (the
  // budget's maximum when none fits).
  const auto rec = doc::plan_from_json(out).recommendation;
  const int gpus = rec && rec->gpus ? static_cast<int>(*rec->gpus) : t.world;
  const config::Config at = with_gpus(cfg, gpus);
  json warned = json::array();
  const Target planned = target_of(m, at, warned);
  for (auto& w : warned) warnings.push_back(std::move(w));
  json target = target_json(planned, at);
  target["max_gpus"] = t.world;
  out["target"] = std::move(target);
  out["piloted_device"] = piloted_device(m, planned, cfg);
  out["node"] = node_json(m, cfg);
  if (rec && rec->device)
    if (const Device* d = catalog.find(*rec->device)) out["advice"] = advice(*d, mm, planned, cfg.budget.gpus_per_node);
  out["assumptions"] = assumptions_of(m, planned, devices);
  out["warnings"] = warnings;
  // Which catalog the figures came from, by digest: `anchor bundle` carries exactly these bytes.
  out["catalog"] = {{"path", catalog.path}, {"sha256", catalog.sha256}};
  return out;
}

}  // namespace anchor::plan
