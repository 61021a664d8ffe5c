#include "anchor/train/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace anchor::train {

double lr_at(const config::TrainConfig& t, std::int64_t step, std::int64_t total) {
  const double base = t.optimizer.lr;
  const auto& s = t.schedule;
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return base * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.kind == "constant") return base;
  const double min_lr = base * s.min_lr_ratio;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - s.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  return min_lr + 0.5 * (base - min_lr) * (1.0 + std::cos(M_PI * progress));
}

std::int64_t total_steps(const config::Config& c, int world_size) {
  if (c.train.total_steps > 0) return c.train.total_steps;
  const std::int64_t per_step =
      static_cast<std::int64_t>(c.train.micro_batch) * c.train.grad_accum * world_size * c.data.seq_len;
  if (c.train.total_tokens > 0 && per_step > 0) return std::max<std::int64_t>(1, c.train.total_tokens / per_step);
  return 1;
}

}  // namespace anchor::train
