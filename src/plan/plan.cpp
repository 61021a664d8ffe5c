#include "anchor/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "anchor/error.hpp"

namespace anchor::plan {
namespace {

using json = nlohmann::json;

constexpr double kSecondsPerDay = 86400.0;
const char* const kReportHint =
    "the report needs the measurements of a pilot that measures memory and the model "
    "(measurements.model, .step, .memory, .checkpoint_save; docs/plan.md); re-run "
    "`anchor pilot` with this anchor";

// The value at `pointer` (e.g. "/measurements/step/seconds"); Error naming it
// when absent or null.
const json& at(const json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p) || j.at(p).is_null())
    throw Error(ErrorKind::kUsage, "report: missing " + pointer.substr(1), kReportHint);
  return j.at(p);
}

double num(const json& j, const std::string& pointer) {
  const json& v = at(j, pointer);
  if (!v.is_number())
    throw Error(ErrorKind::kUsage,
                "report: " + pointer.substr(1) + " is " + v.dump() + ", expected a number",
                kReportHint);
  return v.get<double>();
}

double positive(const json& j, const std::string& pointer) {
  const double v = num(j, pointer);
  if (!(v > 0))
    throw Error(ErrorKind::kUsage,
                "report: " + pointer.substr(1) + " is " + std::to_string(v) + ", expected > 0",
                kReportHint);
  return v;
}

// Everything the plan takes from the report, in one place.
struct Measured {
  std::string device;
  double parameters = 0;
  int n_layer = 1;
  double n_embd = 0;
  double seq_len = 0;
  double flops_per_token = 0;
  double step_seconds = 0;
  double step_tokens = 0;
  double tokens_per_s = 0;
  double data_wait_s = 0;
  double compute_s = 0;
  double stall_percent = 0;
  double save_bytes = 0;
  double save_seconds = 0;
  std::string memory_source;
  std::string libtorch;
  json stages_passed = json::array();
};

Measured read_measured(const json& r) {
  Measured m;
  m.device = r.value("device", "unknown");
  m.parameters = positive(r, "/measurements/model/parameters");
  m.n_layer = static_cast<int>(positive(r, "/measurements/model/n_layer"));
  m.n_embd = positive(r, "/measurements/model/n_embd");
  m.seq_len = positive(r, "/measurements/model/seq_len");
  m.flops_per_token = positive(r, "/measurements/model/flops_per_token");
  m.step_seconds = positive(r, "/measurements/step/seconds");
  m.step_tokens = positive(r, "/measurements/step/tokens");
  m.tokens_per_s = positive(r, "/measurements/step/tokens_per_s");
  m.data_wait_s = num(r, "/measurements/step/data_wait_s");
  m.compute_s = num(r, "/measurements/step/compute_s");
  m.stall_percent = num(r, "/measurements/step/stall_percent");
  m.save_bytes = positive(r, "/measurements/checkpoint_save/bytes");
  m.save_seconds = positive(r, "/measurements/checkpoint_save/seconds");
  m.memory_source = at(r, "/measurements/memory/source").get<std::string>();
  const json::json_pointer lt("/manifest/dependencies/libtorch");
  if (r.contains(lt) && r.at(lt).is_string()) m.libtorch = r.at(lt).get<std::string>();
  if (r.contains("stages") && r["stages"].is_array())
    for (const auto& s : r["stages"])
      if (s.value("status", "") == "passed") m.stages_passed.push_back(s.value("stage", ""));
  return m;
}

// Training FLOPs per token at another sequence length: the attention term
// 12 * n_layer * n_embd * T (PaLM appendix B; 6N is the rest) moves with T.
double flops_per_token_at(const Measured& m, double seq_len) {
  return m.flops_per_token + 12.0 * m.n_layer * m.n_embd * (seq_len - m.seq_len);
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
  return {{"parameters", b.parameters},       {"gradients", b.gradients},
          {"optimizer", b.optimizer},         {"other_fixed", b.other_fixed},
          {"cast_weights", b.cast_weights},   {"gather_buffer", b.gather_buffer},
          {"activations", b.activations},     {"total", b.total}};
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
    throw Error(ErrorKind::kUsage,
                "comm volume: stage " + std::to_string(stage) + ", world " +
                    std::to_string(world) + ", degree " + std::to_string(degree) +
                    ", grad_accum " + std::to_string(grad_accum) +
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
  const double r = static_cast<double>(world / degree);
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

nlohmann::json make_budget(const BudgetInput& in) {
  json items = json::array();
  auto item = [&](const char* name, double seconds, std::string detail) {
    items.push_back({{"name", name}, {"hours", seconds / 3600.0}, {"detail", std::move(detail)}});
    return seconds;
  };
  double total_s = 0;
  total_s += item("download", in.download_gb * 8.0 / in.ingress_gbps,
                  fixed(in.download_gb, 1) + " GB at " + fixed(in.ingress_gbps, 2) + " Gbit/s");
  total_s += item("preprocess", in.preprocess_hours * 3600.0, "budget.preprocess_hours");
  const double train_s = in.steps * in.compute_s_per_step;
  total_s += item("training_steps", train_s,
                  fixed(in.steps, 0) + " steps x " + fixed(in.compute_s_per_step, 4) +
                      " s (compute + communication)");
  const double data_s = in.steps * in.data_wait_s_per_step;
  total_s += item("data_loading", data_s,
                  fixed(in.steps, 0) + " steps x " + fixed(in.data_wait_s_per_step, 4) +
                      " s data wait (measured per token, scaled)");
  const double evals = in.evals;
  const double eval_s = evals * in.eval_s;
  total_s += item("eval", eval_s, fixed(evals, 0) + " evals x " + fixed(in.eval_s, 3) + " s");

  const double work_s = train_s + data_s + eval_s;
  const double mtbf_s = in.failures_per_day > 0
                            ? kSecondsPerDay / (in.failures_per_day * std::max(1, in.nodes))
                            : std::numeric_limits<double>::infinity();
  const double tau = young_daly_interval_s(in.save_s, mtbf_s);
  double checkpoints = 0;
  if (work_s > 0) checkpoints = std::isinf(tau) ? 1.0 : std::max(1.0, std::ceil(work_s / tau));
  const double ckpt_s = checkpoints * in.save_s;
  total_s += item("checkpoints", ckpt_s,
                  fixed(checkpoints, 0) + " saves x " + fixed(in.save_s, 3) +
                      " s (measured), every " +
                      (std::isinf(tau) ? std::string("run (no failures expected)")
                                       : fixed(tau / 3600.0, 2) + " h (Young/Daly)"));
  const double exposed_days = (work_s + ckpt_s) / kSecondsPerDay;
  const double restarts = exposed_days * in.failures_per_day * std::max(1, in.nodes);
  const double lost_s = std::min(tau, work_s) / 2.0;
  const double restart_s = restarts * (in.restart_minutes * 60.0 + lost_s);
  total_s += item("restarts", restart_s,
                  fixed(restarts, 2) + " expected x (" + fixed(in.restart_minutes, 1) +
                      " min restart + " + fixed(lost_s / 60.0, 1) + " min lost work)");
  total_s += item("export", in.export_gb * 8.0 / in.egress_gbps,
                  fixed(in.export_gb, 1) + " GB at " + fixed(in.egress_gbps, 2) + " Gbit/s");
  const double copy_gb = in.checkpoint_bytes / 1e9;
  total_s += item("copy_off_node", work_s > 0 ? copy_gb * 8.0 / in.egress_gbps : 0.0,
                  "final checkpoint " + fixed(copy_gb, 3) + " GB at " + fixed(in.egress_gbps, 2) +
                      " Gbit/s");

  const double hours = total_s / 3600.0;
  const double days_raw = hours / 24.0;
  const double days = days_raw * (1.0 + in.margin);
  const double terms7 = std::max(1.0, std::ceil(days / 7.0));
  const double terms30 = std::max(1.0, std::ceil(days / 30.0));
  const double cost7 = in.world * 7.0 * 24.0 * terms7 * in.price_7_day;
  const double cost30 = in.world * 30.0 * 24.0 * terms30 * in.price_30_day;
  json b;
  b["items"] = items;
  b["hours"] = hours;
  b["days_without_margin"] = days_raw;
  b["margin"] = in.margin;
  b["days"] = days;
  b["term"] = term_for_days(days);
  b["mtbf_hours"] = std::isinf(mtbf_s) ? json(nullptr) : json(mtbf_s / 3600.0);
  b["checkpoint_interval_s"] = std::isinf(tau) ? json(nullptr) : json(tau);
  b["checkpoints"] = checkpoints;
  b["expected_restarts"] = restarts;
  b["gpus"] = in.world;
  b["gpu_hours"] = in.world * hours * (1.0 + in.margin);
  b["terms_7_day"] = terms7;
  b["cost_7_day"] = cost7;
  b["terms_30_day"] = terms30;
  b["cost_30_day"] = cost30;
  b["cheaper_term"] = cost7 <= cost30 ? "7-day" : "30-day";
  if (days > 30.0)
    b["note"] = "the run is longer than 30 days (" + fixed(days, 1) +
                " days with margin): it needs " + fixed(terms30, 0) +
                " consecutive 30-day terms or more GPUs";
  return b;
}

// ---------------------------------------------------------------------------
// From the report.

MemoryModel memory_model_from_report(const json& r) {
  const json& pts = at(r, "/measurements/memory/points");
  if (!pts.is_array())
    throw Error(ErrorKind::kUsage, "report: measurements.memory.points is not a list", kReportHint);
  std::vector<MemoryPoint> points;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const std::string p = "/measurements/memory/points/" + std::to_string(i);
    points.push_back({static_cast<std::int64_t>(num(r, p + "/micro_batch")),
                      static_cast<std::int64_t>(num(r, p + "/seq_len")),
                      num(r, p + "/peak_allocated_bytes")});
  }
  StateBytes s;
  s.parameters = num(r, "/measurements/memory/state_bytes/parameters");
  s.gradients = num(r, "/measurements/memory/state_bytes/gradients");
  s.optimizer = num(r, "/measurements/memory/state_bytes/optimizer");
  const Precision prec = parse_precision(at(r, "/measurements/memory/precision").get<std::string>());
  const int n_layer = static_cast<int>(num(r, "/measurements/model/n_layer"));
  return MemoryModel(fit_memory(points), s, prec, n_layer);
}

namespace {

struct Choice {
  int stage = 0;
  int degree = 1;
  MemoryBreakdown peak;
  bool fits = false;
};

json rocm_checklist(const config::Config& cfg, const Measured& m) {
  json c;
  json ops = json::array();
  std::string ops_note;
  if (cfg.model.source == "torchscript") {
    ops_note = "model.source is torchscript (" + cfg.model.torchscript +
               "): any custom op or kernel the module calls needs a ROCm build; anchor does not "
               "inspect the module: list them before renting";
  } else {
    ops_note = "none: the built-in GPT (model.source " + cfg.model.source +
               ") uses stock ATen ops only; the config declares no custom ops or kernels";
  }
  c["custom_ops"] = ops;
  c["custom_ops_note"] = ops_note;
  c["packages"] = json::array(
      {"LibTorch 2.x built for ROCm (HIP), matching the node's ROCm release (the pilot ran "
       "LibTorch " + (m.libtorch.empty() ? std::string("unknown") : m.libtorch) + ")",
       "RCCL (ships with ROCm; ProcessGroupNCCL uses it under HIP) for multi-GPU",
       "amdgpu kernel driver and rocm-smi (device memory and health reports)",
       "anchor built against that LibTorch (ROCm exposes the GPU as device 'cuda' in LibTorch)"});
  c["exercised_by_pilot"] = json::array(
      {"model forward and backward: embedding, layer norm, linear/matmul, causal softmax "
       "attention, GELU, dropout, cross-entropy",
       "AdamW step with global grad-norm clipping",
       "eval (forward only)", "checkpoint save and restore (safetensors) with bitwise resume"});
  c["pilot_stages_passed"] = m.stages_passed;
  c["pilot_device"] = m.device;
  c["qualified"] = m.device == "rocm";
  c["status"] = m.device == "rocm"
                    ? "the pilot ran on ROCm: these ops were exercised there"
                    : "not qualified: the pilot ran on " + m.device +
                          "; run `anchor pilot` on an MI300X node (device: rocm) with the same "
                          "config before committing to it";
  return c;
}

}  // namespace

nlohmann::json make_plan(const nlohmann::json& report, const Catalog& catalog,
                         const config::Config& cfg) {
  const Measured m = read_measured(report);
  const MemoryModel mm = memory_model_from_report(report);
  const MemoryFit& fit = mm.fit();
  const Precision measured_prec =
      parse_precision(report.at(json::json_pointer("/measurements/memory/precision")).get<std::string>());

  json assumptions = json::array();
  json warnings = json::array();

  // Devices to plan for.
  std::vector<const Device*> devices;
  if (cfg.budget.devices.empty()) {
    for (const auto& d : catalog.devices) devices.push_back(&d);
  } else {
    for (const auto& n : cfg.budget.devices) {
      const Device* d = catalog.find(n);
      if (!d) {
        std::string names;
        for (const auto& c : catalog.devices) names += (names.empty() ? "" : ", ") + c.name;
        throw Error(ErrorKind::kUsage,
                    "budget.devices names '" + n + "', which is not in catalog " + catalog.path,
                    "the catalog has: " + names);
      }
      devices.push_back(d);
    }
  }

  // The target: the config (with overrides), the long run's size from budget.*.
  const std::int64_t mb = cfg.train.micro_batch;
  const std::int64_t seq = cfg.data.seq_len;
  const int ga = cfg.train.grad_accum;
  const Precision prec = parse_precision(cfg.train.precision);
  const int nodes = cfg.budget.nodes;
  const int world = cfg.budget.nodes * cfg.budget.gpus_per_node;
  const double headroom = cfg.budget.headroom;
  const double tokens_per_gpu_step = static_cast<double>(mb) * seq * ga;
  const double fpt = flops_per_token_at(m, static_cast<double>(seq));
  const double cfg_global_seqs = cfg.train.global_batch > 0
                                     ? static_cast<double>(cfg.train.global_batch)
                                     : static_cast<double>(mb) * ga * cfg.distributed.nproc_per_node;
  double run_tokens = 0;
  std::string run_length;
  if (cfg.train.total_tokens > 0) {
    run_tokens = static_cast<double>(cfg.train.total_tokens);
    run_length = "train.total_tokens " + std::to_string(cfg.train.total_tokens);
  } else if (cfg.train.total_steps > 0) {
    run_tokens = static_cast<double>(cfg.train.total_steps) * cfg_global_seqs * seq;
    run_length = "train.total_steps " + std::to_string(cfg.train.total_steps) + " x global batch " +
                 fixed(cfg_global_seqs, 0) + " x seq_len " + std::to_string(seq) + " tokens";
  } else {
    warnings.push_back(
        "train.total_steps and train.total_tokens are both 0: the training time of the long run "
        "is not planned (set one of them, e.g. --set train.total_tokens=...)");
  }
  const double long_steps = run_tokens > 0 ? std::ceil(run_tokens / (world * tokens_per_gpu_step)) : 0;
  const double config_steps = run_tokens > 0 ? run_tokens / (cfg_global_seqs * seq) : 0;
  const double evals =
      cfg.budget.eval_every_steps > 0 ? std::floor(config_steps / cfg.budget.eval_every_steps) : 0;

  // The model the figures were measured on must be the one planned for.
  const json::json_pointer mm_ptr("/measurements/model");
  const json& mmodel = report.at(mm_ptr);
  if (mmodel.value("n_layer", 0) != cfg.model.n_layer ||
      mmodel.value("n_embd", 0) != cfg.model.n_embd ||
      mmodel.value("n_head", cfg.model.n_head) != cfg.model.n_head ||
      mmodel.value("vocab_size", cfg.model.vocab_size) != cfg.model.vocab_size)
    warnings.push_back(
        "model.* differs from the measured model (measurements.model): the memory model and "
        "FLOPs are those of the MEASURED model; pilot the new model to plan it");

  json out;
  out["format"] = "anchor.plan/v1";

  out["measured"] = {
      {"device", m.device},
      {"memory_source", m.memory_source},
      {"step_seconds", m.step_seconds},
      {"step_tokens", m.step_tokens},
      {"tokens_per_s", m.tokens_per_s},
      {"data_wait_s", m.data_wait_s},
      {"stall_percent", m.stall_percent},
      {"flops_per_token", m.flops_per_token},
      {"achieved_tflops", m.flops_per_token * m.tokens_per_s / 1e12},
      {"checkpoint_save_bytes", m.save_bytes},
      {"checkpoint_save_seconds", m.save_seconds},
      {"note", "measured by the pilot on " + m.device + "; every other figure in this plan is an "
               "estimate derived from these and the catalog"}};

  json mem_points = json::array();
  {
    const json& pts = report.at(json::json_pointer("/measurements/memory/points"));
    for (std::size_t i = 0; i < pts.size(); ++i)
      mem_points.push_back({{"micro_batch", pts[i]["micro_batch"]},
                            {"seq_len", pts[i]["seq_len"]},
                            {"measured_bytes", pts[i]["peak_allocated_bytes"]},
                            {"fitted_bytes", fit.predicted[i]},
                            {"residual_bytes", fit.residual[i]}});
  }
  out["memory_model"] = {
      {"formula", fit.quadratic ? "peak = fixed + a*(mb*T) + b*(mb*T*T)"
                                : "peak = fixed + a*(mb*T)  (linear model)"},
      {"quadratic", fit.quadratic},
      {"note", fit.note},
      {"fixed_bytes", fit.fixed},
      {"a_bytes_per_token", fit.per_token},
      {"b_bytes_per_token_per_seq", fit.per_token_seq},
      {"measured_precision", precision_name(measured_prec)},
      {"state_bytes",
       {{"parameters", mm.state().parameters},
        {"gradients", mm.state().gradients},
        {"optimizer", mm.state().optimizer},
        {"total", mm.state().total()}}},
      {"other_fixed_bytes", mm.other_fixed()},
      {"points", mem_points},
      {"max_relative_residual", fit.max_relative_residual}};
  if (!fit.note.empty()) warnings.push_back("memory model: " + fit.note);
  if (fit.per_token < 0 || fit.per_token_seq < 0)
    warnings.push_back("memory model: a fitted activation coefficient is negative (noisy points?); "
                       "predictions far from the measured points are unreliable");

  out["target"] = {{"micro_batch", mb},
                   {"seq_len", seq},
                   {"grad_accum", ga},
                   {"precision", precision_name(prec)},
                   {"nodes", nodes},
                   {"gpus_per_node", cfg.budget.gpus_per_node},
                   {"world_size", world},
                   {"headroom", headroom},
                   {"configured_strategy", cfg.distributed.strategy},
                   {"run_tokens", run_tokens},
                   {"run_length", run_length},
                   {"long_run_steps", long_steps},
                   {"tokens_per_gpu_step", tokens_per_gpu_step},
                   {"flops_per_token", fpt}};

  json devs = json::array();
  bool have_best = false;
  std::size_t best_index = 0;
  double best_cost = std::numeric_limits<double>::infinity();
  double best_cost_per_token = std::numeric_limits<double>::infinity();
  std::vector<json> budgets;

  for (const Device* d : devices) {
    const double capacity = d->memory_bytes() * (1.0 - headroom);
    json considered = json::array();
    auto try_option = [&](int stage, int degree) {
      Choice c;
      c.stage = stage;
      c.degree = degree;
      c.peak = mm.predict({mb, seq, prec, stage, degree});
      c.fits = c.peak.total <= capacity;
      considered.push_back({{"strategy", strategy_name(stage, world)},
                            {"sharding_degree", degree},
                            {"predicted_peak_bytes", c.peak.total},
                            {"fits", c.fits}});
      return c;
    };
    Choice chosen = try_option(0, 1);
    Choice last = chosen;
    if (!chosen.fits && world > 1) {
      for (int stage = 1; stage <= 3 && !chosen.fits; ++stage)
        for (int deg : divisors_from_2(world)) {
          last = try_option(stage, deg);
          if (last.fits) {
            chosen = last;
            break;
          }
        }
    }
    const bool fits = chosen.fits;
    const Choice& shown = fits ? chosen : last;  // not fitting: the most sharded option tried

    json dj;
    dj["name"] = d->name;
    dj["platform"] = d->platform;
    dj["memory_bytes"] = d->memory_bytes();
    dj["usable_bytes"] = capacity;
    dj["fits"] = fits;
    dj["strategy"] = fits ? strategy_name(chosen.stage, world) : "none";
    dj["zero_stage"] = shown.stage;
    dj["sharding_degree"] = shown.degree;
    dj["predicted_peak_bytes"] = shown.peak.total;
    dj["predicted_peak"] = breakdown_json(shown.peak);
    dj["considered"] = considered;
    const auto maxmb = mm.max_micro_batch({mb, seq, prec, shown.stage, shown.degree}, capacity);
    dj["max_micro_batch"] = maxmb ? json(*maxmb) : json(nullptr);

    std::string why;
    if (fits && chosen.stage == 0)
      why = "replicated state + activations " + fixed(gib(chosen.peak.total), 2) + " GiB <= " +
            fixed(gib(capacity), 2) + " GiB usable (" + fixed(100 * (1 - headroom), 0) + "% of " +
            fixed(d->memory_gb, 0) + " GB)";
    else if (fits)
      why = "replicated (DDP) needs " + fixed(gib(considered[0]["predicted_peak_bytes"].get<double>()), 2) +
            " GiB > " + fixed(gib(capacity), 2) + " GiB usable; " +
            strategy_name(chosen.stage, world) + " over " + std::to_string(chosen.degree) +
            " ranks needs " + fixed(gib(chosen.peak.total), 2) +
            " GiB, the first stage and degree that fits";
    else
      why = "does not fit: even " + std::string(strategy_name(shown.stage, world)) + " over " +
            std::to_string(shown.degree) + " ranks needs " + fixed(gib(shown.peak.total), 2) +
            " GiB > " + fixed(gib(capacity), 2) +
            " GiB usable; lower train.micro_batch, use activation checkpointing, or add GPUs";
    dj["decision"] = why;

    // Step time (estimate).
    const double peak_flops = d->bf16_tflops * 1e12 * (prec == Precision::kFp32 ? 0.5 : 1.0);
    const double compute_s = tokens_per_gpu_step * fpt / (peak_flops * kAssumedMfu);
    const double grad_bytes = mm.state().gradients;
    const double comm_bytes =
        world > 1 ? comm_bytes_per_step(shown.stage, world, shown.degree, grad_bytes, ga) : 0.0;
    const double comm_s = comm_bytes / (d->interconnect_gbps * 1e9);
    const double data_s = m.data_wait_s * tokens_per_gpu_step / m.step_tokens;
    const double step_s = compute_s + comm_s + data_s;
    dj["comm_bytes_per_step"] = comm_bytes;
    dj["comm_seconds_per_step"] = comm_s;
    dj["compute_seconds_per_step"] = compute_s;
    dj["data_wait_seconds_per_step"] = data_s;
    dj["projected_step_seconds"] = step_s;
    dj["projected_tokens_per_s"] = world * tokens_per_gpu_step / step_s;
    dj["step_time_is"] = "ESTIMATE: FLOPs / (peak x MFU " + fixed(kAssumedMfu, 2) +
                         ") + communication at the interconnect's rate + measured data wait";

    // Budget for the whole run on this device.
    BudgetInput bi;
    bi.world = world;
    bi.nodes = nodes;
    bi.steps = long_steps;
    bi.compute_s_per_step = compute_s + comm_s;
    bi.data_wait_s_per_step = data_s;
    bi.evals = evals;
    const double eval_tokens = static_cast<double>(cfg.pilot.eval_batches) * mb * seq;
    bi.eval_s = eval_tokens * fpt / 3.0 / (world * peak_flops * kAssumedMfu);
    bi.save_s = m.save_seconds;
    bi.checkpoint_bytes = m.save_bytes;
    bi.failures_per_day = cfg.budget.failures_per_day;
    bi.restart_minutes = cfg.budget.restart_minutes;
    bi.download_gb = cfg.budget.download_gb;
    bi.ingress_gbps = cfg.budget.ingress_gbps;
    bi.preprocess_hours = cfg.budget.preprocess_hours;
    bi.export_gb = cfg.budget.export_gb;
    bi.egress_gbps = cfg.budget.egress_gbps;
    bi.margin = cfg.budget.margin;
    bi.price_7_day = d->price_7_day;
    bi.price_30_day = d->price_30_day;
    json b = make_budget(bi);
    b["device"] = d->name;
    b["currency"] = d->currency;
    b["prices_are"] = "EXAMPLES from the catalog unless you edited them";
    dj["days"] = b["days"];
    dj["term"] = b["term"];
    dj["cost_7_day"] = b["cost_7_day"];
    dj["cost_30_day"] = b["cost_30_day"];
    dj["price_per_gpu_hour"] = {{"term_7_day", d->price_7_day}, {"term_30_day", d->price_30_day}};
    if (d->platform == "rocm") dj["rocm_qualification"] = rocm_checklist(cfg, m);
    devs.push_back(dj);
    budgets.push_back(b);

    if (fits) {
      const double cost = std::min(b["cost_7_day"].get<double>(), b["cost_30_day"].get<double>());
      const double per_token = d->price_30_day * world / dj["projected_tokens_per_s"].get<double>();
      if (cost < best_cost || (cost == best_cost && per_token < best_cost_per_token)) {
        best_cost = cost;
        best_cost_per_token = per_token;
        best_index = devs.size() - 1;
        have_best = true;
      }
    }
  }
  out["devices"] = devs;

  if (have_best) {
    const json& bd = devs[best_index];
    const json& b = budgets[best_index];
    out["recommendation"] = {
        {"device", bd["name"]},
        {"strategy", bd["strategy"]},
        {"sharding_degree", bd["sharding_degree"]},
        {"gpus", world},
        {"micro_batch", mb},
        {"max_micro_batch", bd["max_micro_batch"]},
        {"projected_step_seconds", bd["projected_step_seconds"]},
        {"days", b["days"]},
        {"term", b["term"]},
        {"cost", best_cost},
        {"cheaper_term", b["cheaper_term"]},
        {"why", "the fitting device with the lowest cost for the whole run (" +
                    b["cheaper_term"].get<std::string>() + " terms, example prices); ties go to "
                    "the lower cost per token"}};
    out["budget"] = b;
  } else {
    out["recommendation"] = {
        {"device", nullptr},
        {"why", "no catalog device fits the target even fully sharded (ZeRO-3 over all " +
                    std::to_string(world) + " GPUs); lower train.micro_batch or data.seq_len, "
                    "use activation checkpointing, or plan more GPUs (budget.nodes)"}};
    out["budget"] = nullptr;
  }

  // Assumptions, stated with the numbers they use.
  assumptions.push_back("MEASURED: step time, tokens/s, data wait, peak memory points, state bytes "
                        "and checkpoint save time come from the pilot on " + m.device +
                        " (memory source: " + m.memory_source + ")");
  assumptions.push_back("ESTIMATE: projected step time = tokens per GPU step x FLOPs per token / "
                        "(catalog peak x assumed MFU " + fixed(kAssumedMfu, 2) +
                        "); the pilot's own step time is not scaled (its device is not in the "
                        "catalog); the measured device reached " +
                        fixed(m.flops_per_token * m.tokens_per_s / 1e12, 4) + " TFLOP/s");
  assumptions.push_back("FLOPs per token at seq_len T = measured flops_per_token + 12 x n_layer x "
                        "n_embd x (T - measured T) (the attention term)");
  if (prec == Precision::kFp32)
    assumptions.push_back("precision fp32: peak taken as half the catalog's dense bf16 figure "
                          "(TF32 tensor-core rate on A100/H100/H200/MI300X)");
  if (prec != measured_prec)
    assumptions.push_back(std::string("precision ") + precision_name(prec) + " vs measured " +
                          precision_name(measured_prec) + ": activations scale by " +
                          fixed(activation_element_bytes(prec) / activation_element_bytes(measured_prec), 2) +
                          " (element size); fp32 master weights, fp32 gradients and the "
                          "optimizer state are unchanged");
  if (prec != Precision::kFp32)
    assumptions.push_back("autocast " + std::string(precision_name(prec)) +
                          " keeps a 2-byte copy of every fp32 weight during the step: + "
                          "parameters/2 bytes (cast_weights)");
  assumptions.push_back("sharding: ZeRO-1 divides optimizer state by the degree, ZeRO-2 also "
                        "gradients, ZeRO-3/FSDP also parameters (+ one layer's gathered "
                        "parameters, parameters / n_layer); the other fixed part is not sharded");
  assumptions.push_back("device memory: catalog memory_gb x 10^9 bytes, of which budget.headroom " +
                        fixed(headroom, 2) + " is kept free (CUDA/HIP context, fragmentation)");
  assumptions.push_back("communication: ring collectives at the catalog's per-GPU interconnect "
                        "bandwidth, bandwidth term only, not overlapped with compute (an upper "
                        "bound on its cost in the step, a lower bound on its own duration)");
  if (nodes > 1)
    assumptions.push_back("nodes > 1: the catalog has no inter-node network figure; communication "
                          "uses the intra-node interconnect and is OPTIMISTIC");
  assumptions.push_back("data-parallel scaling: the long run processes " +
                        (run_length.empty() ? std::string("0 tokens") : run_length) + " over " +
                        std::to_string(world) + " GPUs (budget.nodes x budget.gpus_per_node), "
                        "each at the configured micro_batch x grad_accum; ideal scaling apart "
                        "from the communication above");
  assumptions.push_back("data wait per step = measured data wait per token x tokens per GPU step "
                        "(the target node's loader assumed as fast as the pilot's)");
  assumptions.push_back("checkpoints: measured save time of the full state (" +
                        fixed(m.save_bytes / 1e6, 3) + " MB in " + fixed(m.save_seconds, 3) +
                        " s) on the target's storage; interval sqrt(2 x save_s x MTBF), MTBF = "
                        "1 day / (budget.failures_per_day x budget.nodes); each restart costs "
                        "budget.restart_minutes + half an interval of lost work");
  assumptions.push_back("eval: pilot.eval_batches x micro_batch x seq_len tokens forward-only "
                        "(1/3 of training FLOPs) every budget.eval_every_steps configured steps");
  assumptions.push_back("prices: the catalog's EXAMPLE per-GPU-hour prices; a term is paid in "
                        "full (7 x 24 or 30 x 24 hours per GPU per term)");
  out["assumptions"] = assumptions;
  out["warnings"] = warnings;
  return out;
}

}  // namespace anchor::plan
