#pragma once
// The learning rate as a pure function of the step: linear warmup, then cosine
// decay to lr * min_lr_ratio at the run's last step. No scheduler object, no
// hidden state: a resumed run cannot step it twice or off by one.
#include <cstdint>

#include "anchor/config/config.hpp"

namespace anchor::train {

// Learning rate for optimizer step `step` (0-based). total_steps is the full
// run's length (train.total_steps, or derived from total_tokens).
double lr_at(const config::TrainConfig& t, std::int64_t step, std::int64_t total_steps);

// The full run's optimizer steps: total_steps, or total_tokens / tokens per step.
std::int64_t total_steps(const config::Config& c, int world_size);

}  // namespace anchor::train
