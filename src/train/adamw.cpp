#include "anchor/train/adamw.hpp"

#include <cmath>

namespace anchor::train {

AdamW::AdamW(std::vector<NamedParam> params, const config::OptimizerConfig& cfg)
    : params_(std::move(params)), cfg_(cfg) {}

void AdamW::zero_grad() {
  for (auto& p : params_) p.param.mutable_grad() = torch::Tensor();
}

namespace {
void create(AdamW::State& s, const torch::Tensor& param) {
  if (s.exp_avg.defined()) return;
  s.exp_avg = torch::zeros_like(param, torch::MemoryFormat::Preserve);
  s.exp_avg_sq = torch::zeros_like(param, torch::MemoryFormat::Preserve);
}
}  // namespace

void AdamW::create_state() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) create(state_[p.name], p.param);
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    const auto& grad = p.param.grad();
    if (!grad.defined()) continue;
    auto& s = state_[p.name];
    create(s, p.param);
    s.step += 1;
    if (p.decay && cfg_.weight_decay != 0) p.param.mul_(1.0 - lr * cfg_.weight_decay);
    s.exp_avg.mul_(cfg_.beta1).add_(grad, 1.0 - cfg_.beta1);
    s.exp_avg_sq.mul_(cfg_.beta2).addcmul_(grad, grad, 1.0 - cfg_.beta2);
    const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(s.step));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(s.step));
    const double step_size = lr / bc1;
    auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(cfg_.eps);
    p.param.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : params)
    if (p.param.grad().defined()) norms.push_back(p.param.grad().norm(2));
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm(2).item<double>();
  if (max_norm > 0) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0)
      for (const auto& p : params)
        if (p.param.grad().defined()) p.param.grad().mul_(coef);
  }
  return total;
}

}  // namespace anchor::train
