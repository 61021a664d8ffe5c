#include "activation_probe.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>
#include <string>

#include "anchor/common/units.hpp"
#include "anchor/log.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/train/trainer.hpp"

namespace anchor::worker {
namespace {

constexpr int kMeasuredSteps = 7;  // timed rounds after one untimed step (odd: a true median)

struct Memory {
  std::int64_t peak_bytes = 0;
  std::string source;
};

// The peak tensor bytes of a fresh trainer's second step (full optimizer
// state; the peak reset right before it), alone in the process.
Memory step_peak(const config::Config& cfg) {
  train::Trainer t(cfg);
  const std::string dev = t.device();
  t.train_step();
  measure::reset_peak(dev);
  t.train_step();
  const auto m = measure::tensor_memory(dev);
  return {m.peak_allocated_bytes, m.source};
}

// One side of the timing: a trainer and its own generator state. The two
// sides take turns, so each must draw its dropout from its own stream.
struct Timed {
  explicit Timed(const config::Config& cfg) : t(cfg), device(torch::Device(t.device())) { save_rng(); }
  double step() {
    train::set_cpu_rng_state(cpu_rng);
#if defined(ANCHOR_WITH_CUDA)
    if (device.is_cuda()) train::set_cuda_rng_state(device.index(), cuda_rng);
#endif
    const double s = t.train_step().compute_s;
    save_rng();
    return s;
  }
  void save_rng() {
    cpu_rng = train::get_cpu_rng_state();
#if defined(ANCHOR_WITH_CUDA)
    if (device.is_cuda()) cuda_rng = train::get_cuda_rng_state(device.index());
#endif
  }
  train::Trainer t;
  torch::Device device;
  torch::Tensor cpu_rng, cuda_rng;
  std::vector<double> seconds;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

nlohmann::json measure_activation_checkpointing(const config::Config& cfg) {
  const int every = cfg.train.activation_checkpointing;
  config::Config off = cfg;
  off.train.activation_checkpointing = 0;
  // Memory: one side at a time, so both peaks share the same baseline.
  const Memory with_mem = step_peak(cfg);
  const Memory without_mem = step_peak(off);
  // Time: both trainers alive, taking turns (the order alternating by round),
  // so a burst of other load on the machine hits both sides alike.
  Timed with(cfg), without(off);
  with.step();
  without.step();
  std::vector<double> diffs;  // with - without, within a round: paired, so slow drifts in load cancel
  for (int i = 0; i < kMeasuredSteps; ++i) {
    Timed& first = i % 2 == 0 ? with : without;
    Timed& second = i % 2 == 0 ? without : with;
    first.seconds.push_back(first.step());
    second.seconds.push_back(second.step());
    diffs.push_back(with.seconds.back() - without.seconds.back());
  }
  const bool same_parameters = with.t.parameter_digest() == without.t.parameter_digest();

  const std::int64_t saved = without_mem.peak_bytes - with_mem.peak_bytes;
  const double with_s = median(with.seconds), without_s = median(without.seconds);
  const double added = median(diffs);
  char ms[64];
  std::snprintf(ms, sizeof ms, "%+.2f ms", added * 1e3);
  const int blocks = every > 0 ? cfg.model.n_layer / every : 0;
  const std::string trade =
      "recomputing " + std::to_string(blocks) + " of " + std::to_string(cfg.model.n_layer) + " blocks (every " +
      std::to_string(every) + ") saves " + human_bytes(static_cast<double>(saved)) + " (" +
      percent(static_cast<double>(saved), static_cast<double>(without_mem.peak_bytes)) +
      ") of peak tensor memory per step and costs " + ms + " (" + percent(added, without_s) + ") of step time";
  ANCHOR_LOG_INFO("activation_checkpointing", "{}", trade);
  return {{"every", every},
          {"blocks_checkpointed", blocks},
          {"n_layer", cfg.model.n_layer},
          {"micro_batch", cfg.train.micro_batch},
          {"grad_accum", cfg.train.grad_accum},
          {"seq_len", cfg.data.seq_len},
          {"measured_steps", kMeasuredSteps},
          {"source", with_mem.source},
          {"peak_allocated_bytes", {{"with", with_mem.peak_bytes}, {"without", without_mem.peak_bytes}}},
          {"memory_saved_bytes", saved},
          {"memory_saved_percent",
           without_mem.peak_bytes > 0 ? 100.0 * static_cast<double>(saved) / static_cast<double>(without_mem.peak_bytes)
                                      : 0.0},
          {"step_seconds", {{"with", with_s}, {"without", without_s}}},
          {"time_added_seconds", added},
          {"time_added_percent", without_s > 0 ? 100.0 * added / without_s : 0.0},
          {"same_parameters", same_parameters},
          {"trade", trade}};
}

}  // namespace anchor::worker
