#include "anchor/train/loss_scaler.hpp"

#include <cmath>

#include "anchor/error.hpp"

namespace anchor::train {

LossScaler::LossScaler(const config::LossScaleConfig& cfg, bool enabled) : cfg_(cfg), enabled_(enabled) {
  state_.scale = enabled ? cfg.init_scale : 1.0;
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return !found_inf;
  if (found_inf) {
    state_.scale *= cfg_.backoff_factor;
    state_.growth_tracker = 0;
    state_.skipped_steps += 1;
    return false;
  }
  state_.growth_tracker += 1;
  if (state_.growth_tracker >= cfg_.growth_interval) {
    const double grown = state_.scale * cfg_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;  // as torch.cuda.amp: never grow into inf
    state_.growth_tracker = 0;
  }
  return true;
}

void LossScaler::set_state(const State& s) {
  if (!(s.scale > 0) || !std::isfinite(s.scale) || s.growth_tracker < 0 || s.skipped_steps < 0)
    throw Error(ErrorKind::kVerification,
                "loss scaler state is invalid (scale " + std::to_string(s.scale) + ", growth tracker " +
                    std::to_string(s.growth_tracker) + ", skipped " + std::to_string(s.skipped_steps) + ")",
                "the checkpoint's scaler.safetensors is damaged or from another tool");
  state_ = s;
}

bool loss_scaling_enabled(const config::TrainConfig& t) {
  if (t.loss_scale.enabled == "true") return true;
  if (t.loss_scale.enabled == "false") return false;
  return t.precision == "fp16";
}

}  // namespace anchor::train
