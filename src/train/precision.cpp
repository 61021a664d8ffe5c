#include "anchor/train/precision.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"
#include "anchor/train/trainer.hpp"
#include "compat/torch_compat.hpp"

namespace anchor::train {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw Error(ErrorKind::kConfig, "train.precision: '" + name + "' is not a precision", "use fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

AutocastGuard::AutocastGuard(Precision p, bool cuda) {
  if (p == Precision::kFp32) return;
  active_ = true;
  cuda_ = cuda;
  prev_enabled_ = compat::autocast_enabled(cuda);
  prev_dtype_ = compat::autocast_dtype(cuda);
  compat::set_autocast(cuda, true, p == Precision::kBf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(cuda_, prev_enabled_, prev_dtype_);
}

std::vector<std::string> non_finite_names(const NamedTensors& ts) {
  std::vector<std::string> out;
  std::vector<torch::Tensor> flags;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].second.defined()) continue;
    flags.push_back(torch::isfinite(ts[i].second.detach()).logical_not().any());
    index.push_back(i);
  }
  if (flags.empty()) return out;
  auto f = torch::stack(flags).to(torch::kCPU);  // one copy to the host
  const auto* p = f.data_ptr<bool>();
  for (std::size_t k = 0; k < index.size(); ++k)
    if (p[k]) out.push_back(ts[index[k]].first);
  return out;
}

namespace {

double rel_diff(double ref, double x) {
  if (ref == x) return 0.0;
  return std::fabs(x - ref) / std::max(std::fabs(ref), 1e-30);
}

void find_non_finite(const NamedTensors& ts, const std::string& what, nlohmann::json& out) {
  for (const auto& n : non_finite_names(ts)) out.push_back({{"tensor", n}, {"what", what}});
}

double norm_of(const torch::Tensor& t) {
  return t.defined() ? t.detach().to(torch::kFloat64).norm(2).item<double>() : 0.0;
}

}  // namespace

nlohmann::json compare_precision(const PrecisionSide& a, const PrecisionSide& b, double tol,
                                 const NamedTensors& parameters) {
  nlohmann::json out = {{"reference", a.label}, {"precision", b.label}, {"tolerance", tol}};
  // Non-finite anywhere fails: name every tensor.
  nlohmann::json bad = nlohmann::json::array();
  if (!std::isfinite(a.loss)) bad.push_back({{"tensor", "loss"}, {"what", a.label + " loss"}});
  if (!std::isfinite(b.loss)) bad.push_back({{"tensor", "loss"}, {"what", b.label + " loss"}});
  find_non_finite(parameters, "parameter", bad);
  find_non_finite(a.grads, a.label + " gradient", bad);
  find_non_finite(b.grads, b.label + " gradient", bad);
  out["non_finite"] = bad;
  if (!bad.empty()) {
    out["verdict"] = "non_finite";
    return out;
  }

  if (a.grads.size() != b.grads.size())
    throw Error(ErrorKind::kRuntime, "precision check: " + std::to_string(a.grads.size()) + " fp32 gradients, " +
                                         std::to_string(b.grads.size()) + " in " + b.label);
  nlohmann::json params = nlohmann::json::array();
  double sq_a = 0, sq_b = 0;
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    const auto& [name, ga] = a.grads[i];
    const auto& gb = b.grads[i].second;
    if (b.grads[i].first != name)
      throw Error(ErrorKind::kRuntime, "precision check: gradient " + std::to_string(i) + " is " + name +
                                           " in fp32 and " + b.grads[i].first + " in " + b.label);
    const double na = norm_of(ga), nb = norm_of(gb);
    sq_a += na * na;
    sq_b += nb * nb;
    double err = 0;  // ||g_low - g_fp32|| / ||g_fp32||: how far the direction moved too
    if (ga.defined() && gb.defined()) {
      const double d = norm_of(gb.detach().to(torch::kFloat64) - ga.detach().to(torch::kFloat64));
      err = na > 0 ? d / na : d;
    }
    params.push_back({{"name", name},
                      {"grad_norm_fp32", na},
                      {"grad_norm", nb},
                      {"rel_diff", rel_diff(na, nb)},
                      {"rel_error", err},
                      {"flagged", rel_diff(na, nb) > tol}});
  }
  const double ga = std::sqrt(sq_a), gb = std::sqrt(sq_b);
  out["loss"] = {{"fp32", a.loss},
                 {"value", b.loss},
                 {"rel_diff", rel_diff(a.loss, b.loss)},
                 {"flagged", rel_diff(a.loss, b.loss) > tol}};
  out["grad_norm"] = {{"fp32", ga}, {"value", gb}, {"rel_diff", rel_diff(ga, gb)}, {"flagged", rel_diff(ga, gb) > tol}};

  nlohmann::json flagged = nlohmann::json::array();
  for (const auto& p : params)
    if (p["flagged"].get<bool>()) flagged.push_back(p);
  auto sorted = params;
  std::sort(sorted.begin(), sorted.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return x["rel_diff"].get<double>() > y["rel_diff"].get<double>();
  });
  nlohmann::json largest = nlohmann::json::array();
  for (std::size_t i = 0; i < sorted.size() && i < 5; ++i) largest.push_back(sorted[i]);
  double max_rel = 0;
  for (const auto& p : params) max_rel = std::max(max_rel, p["rel_diff"].get<double>());
  out["parameters"] = {{"count", params.size()}, {"max_rel_diff", max_rel}, {"largest", largest}, {"flagged", flagged}};
  const bool any_flag =
      out["loss"]["flagged"].get<bool>() || out["grad_norm"]["flagged"].get<bool>() || !flagged.empty();
  out["verdict"] = any_flag ? "flagged" : "ok";
  return out;
}

// The Trainer's side of the validation: a member, defined here with the rest
// of the precision code.
nlohmann::json Trainer::validate_precision(double tolerance) {
  const auto rng = get_cpu_rng_state();
#if defined(ANCHOR_WITH_CUDA)
  torch::Tensor cuda_rng;
  if (device_.is_cuda()) cuda_rng = get_cuda_rng_state(device_.index());
#endif
  auto replay_rng = [&] {
    set_cpu_rng_state(rng);
#if defined(ANCHOR_WITH_CUDA)
    if (device_.is_cuda()) set_cuda_rng_state(device_.index(), cuda_rng);
#endif
  };
  nlohmann::json seconds = nlohmann::json::object();
  auto side = [&](Precision p, const std::string& label, bool inject) {
    replay_rng();  // the same dropout masks on both sides
    opt_->zero_grad();
    // The chosen precision runs as training runs it: scaled when the scaler is on.
    const double scale = p == precision_ ? scaler_.scale() : 1.0;
    StepRecord r;
    Sha256 digest;
    const auto t0 = std::chrono::steady_clock::now();
    PrecisionSide s;
    s.label = label;
    s.loss = forward_backward(p, scale, r, digest);
    torch::NoGradGuard no_grad;
    // ANCHOR_GRAD_FAULT at this step: the chosen precision's side gets the inf/NaN.
    for (const auto& [fault_step, value] : grad_faults_)
      if (inject && fault_step == step_ + 1 && !opt_->params().empty() && opt_->params().front().param.grad().defined())
        opt_->params().front().param.grad().view(-1)[0].fill_(value);
    for (const auto& np : opt_->params()) {
      auto g = np.param.grad();
      if (g.defined()) g = scale == 1.0 ? g.detach().clone() : g.detach() * (1.0 / scale);
      s.grads.push_back({np.name, g});
    }
    seconds[p == Precision::kFp32 ? "fp32" : "precision"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  };
  const auto a = side(Precision::kFp32, "fp32", false);
  const auto b = side(
      precision_, std::string(precision_name(precision_)) + (precision_ == Precision::kFp32 ? "" : " autocast"), true);
  replay_rng();
  opt_->zero_grad();
  NamedTensors params;
  for (const auto& np : opt_->params()) params.push_back({np.name, np.param});
  auto out = compare_precision(a, b, tolerance, params);
  out["step"] = step_ + 1;  // the step it validates, counted from 1 as every step is
  out["loss_scale"] = scaler_.scale();
  out["forward_backward_seconds"] = seconds;
  return out;
}

}  // namespace anchor::train
