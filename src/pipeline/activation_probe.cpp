#include "activation_probe.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "anchor/common/units.hpp"
#include "anchor/log.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/train/trainer.hpp"

namespace anchor::pipeline {
namespace {

constexpr int kMeasuredSteps = 5;  // after one unmeasured step; the time is the fastest (least disturbed by load)

struct Side {
  std::int64_t peak_bytes = 0;
  double step_s = 0;
  std::string parameters;  // digest after the last step
  std::string source;
};

Side run_side(const config::Config& cfg) {
  Side s;
  train::Trainer t(cfg);
  const std::string dev = t.device();
  t.train_step();
  s.step_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kMeasuredSteps; ++i) {
    if (i == 0) measure::reset_peak(dev);
    auto r = t.train_step();
    if (i == 0) {
      const auto m = measure::tensor_memory(dev);
      s.peak_bytes = m.peak_allocated_bytes;
      s.source = m.source;
    }
    s.step_s = std::min(s.step_s, r.compute_s);
  }
  s.parameters = t.parameter_digest();
  return s;
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
  const Side with = run_side(cfg);
  const Side without = run_side(off);

  const std::int64_t saved = without.peak_bytes - with.peak_bytes;
  const double added = with.step_s - without.step_s;
  char ms[64];
  std::snprintf(ms, sizeof ms, "%+.2f ms", added * 1e3);
  const int blocks = every > 0 ? cfg.model.n_layer / every : 0;
  const std::string trade = "recomputing " + std::to_string(blocks) + " of " + std::to_string(cfg.model.n_layer) +
                            " blocks (every " + std::to_string(every) + ") saves " + human_bytes(static_cast<double>(saved)) + " (" +
                            percent(static_cast<double>(saved), static_cast<double>(without.peak_bytes)) +
                            ") of peak tensor memory per step and costs " + ms + " (" +
                            percent(added, without.step_s) + ") of step time";
  ANCHOR_LOG_INFO("activation_checkpointing", "{}", trade);
  return {{"every", every},
          {"blocks_checkpointed", blocks},
          {"n_layer", cfg.model.n_layer},
          {"micro_batch", cfg.train.micro_batch},
          {"grad_accum", cfg.train.grad_accum},
          {"seq_len", cfg.data.seq_len},
          {"measured_steps", kMeasuredSteps},
          {"source", with.source},
          {"peak_allocated_bytes", {{"with", with.peak_bytes}, {"without", without.peak_bytes}}},
          {"memory_saved_bytes", saved},
          {"memory_saved_percent", without.peak_bytes > 0 ? 100.0 * static_cast<double>(saved) / static_cast<double>(without.peak_bytes) : 0.0},
          {"step_seconds", {{"with", with.step_s}, {"without", without.step_s}}},
          {"time_added_seconds", added},
          {"time_added_percent", without.step_s > 0 ? 100.0 * added / without.step_s : 0.0},
          {"same_parameters", with.parameters == without.parameters},
          {"trade", trade}};
}

}  // namespace anchor::pipeline
