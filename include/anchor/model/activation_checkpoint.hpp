#pragma once
// Activation checkpointing: run a function (a transformer block) without
// keeping its intermediate activations, and recompute them in backward.
//
// LibTorch's C++ API has no torch.utils.checkpoint; this is ours, a
// torch::autograd::Function. Forward runs `fn(x)` with grad off and keeps
// only `x`, the RNG state(s) at that moment and the autocast state. Backward
// puts the generators back to that state, recomputes `fn(x)` with grad on
// (same dropout masks), backpropagates the incoming gradient through it (the
// parameters' .grad accumulate as in a plain backward), and returns the
// generators to where they were. On CPU the gradients are bitwise those of
// the plain run.
#include <torch/torch.h>

#include <functional>

namespace anchor::model {

struct CheckpointOptions {
  // Test seam: false recomputes without replaying the RNG (dropout masks
  // differ from the forward's): the negative control of the equality tests.
  bool replay_rng = true;
};

// fn must be a pure function of x and the module state it closes over, and
// must outlive the backward pass. Without grad mode (eval) or when neither x
// nor anything fn touches needs grad, it simply returns fn(x).
torch::Tensor checkpoint(const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x,
                         const CheckpointOptions& opts = {});

}  // namespace anchor::model
