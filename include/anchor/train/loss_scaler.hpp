#pragma once
// Dynamic loss scaling of our own (docs/precision.md): the loss is multiplied
// by scale() before backward, the gradients are divided by it before clipping,
// a step with an inf/NaN gradient is skipped and the scale backs off, and after
// growth_interval consecutive clean steps it grows. The whole state travels in
// the checkpoint (Trainer::save_request / restore) and restores bitwise: a
// scaler that restarts at init_scale after a resume is a known divergence.
// No torch here: the tensor side (scaling, unscaling, the inf check) is in the trainer.
#include <cstdint>
#include <string>

#include "anchor/config/config.hpp"

namespace anchor::train {

class LossScaler {
 public:
  struct State {
    double scale = 1.0;
    std::int64_t growth_tracker = 0;  // consecutive clean steps since the last growth or back-off
    std::int64_t skipped_steps = 0;   // optimizer steps skipped for inf/NaN gradients, all told
    bool operator==(const State& o) const {
      return scale == o.scale && growth_tracker == o.growth_tracker && skipped_steps == o.skipped_steps;
    }
  };

  // Disabled: scale() is 1, update() never skips and the state never changes.
  LossScaler(const config::LossScaleConfig& cfg, bool enabled);

  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? state_.scale : 1.0; }
  // The factor that unscales the gradients (exact for the usual powers of two).
  double inv_scale() const { return 1.0 / scale(); }

  // After the gradients of a step were unscaled and checked: found_inf skips
  // the step (returns false) and multiplies the scale by backoff_factor;
  // otherwise the step applies (returns true) and the scale grows by
  // growth_factor after growth_interval consecutive clean steps.
  bool update(bool found_inf);

  const State& state() const { return state_; }
  void set_state(const State& s);
  const config::LossScaleConfig& config() const { return cfg_; }

 private:
  config::LossScaleConfig cfg_;
  bool enabled_;
  State state_;
};

// train.loss_scale.enabled resolved against train.precision: auto is on for fp16 only.
bool loss_scaling_enabled(const config::TrainConfig& t);

}  // namespace anchor::train
