#pragma once
// AdamW with its state keyed by parameter NAME, never by address or position,
// so checkpoints survive model refactors and can be resharded (ZeRO) later.
// The update is PyTorch's single-tensor AdamW (decoupled weight decay; bias
// corrections from a per-parameter step count), written with tensor ops that
// behave the same on LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "anchor/config/config.hpp"

namespace anchor::train {

struct NamedParam {
  std::string name;
  torch::Tensor param;
  bool decay;  // weight decay applies to matrices (dim >= 2), not to biases or LayerNorm
};

class AdamW {
 public:
  struct State {
    torch::Tensor exp_avg, exp_avg_sq;
    std::int64_t step = 0;
  };

  AdamW(std::vector<NamedParam> params, const config::OptimizerConfig& cfg);

  // One update with learning rate `lr` from each parameter's .grad().
  // Parameters without a gradient are skipped (their step does not advance).
  void step(double lr);
  void zero_grad();
  // Each parameter's state as its first step() makes it (zeros, step 0),
  // without a step: the memory probe measures steps with full state without
  // paying for a step to create it. A parameter with state keeps it.
  void create_state();

  const std::vector<NamedParam>& params() const { return params_; }
  std::map<std::string, State>& state() { return state_; }
  const std::map<std::string, State>& state() const { return state_; }

 private:
  std::vector<NamedParam> params_;
  config::OptimizerConfig cfg_;
  std::map<std::string, State> state_;
};

// Clips gradients to a global L2 norm (as torch.nn.utils.clip_grad_norm_) and
// returns the norm before clipping. max_norm <= 0 only computes the norm.
double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm);

}  // namespace anchor::train
