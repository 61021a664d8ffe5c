#pragma once
// train.precision (docs/precision.md): fp32; bf16 autocast (CPU and GPU) or
// fp16 autocast (GPU) around the forward pass, with fp32 master weights,
// fp32 gradients and fp32 optimizer state. And the pilot's numerical
// validation: the same step in fp32 and in the chosen precision, compared.
#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace anchor::train {

enum class Precision { kFp32, kBf16, kFp16 };

Precision parse_precision(const std::string& name);  // fp32 | bf16 | fp16, else Error(kConfig)
const char* precision_name(Precision p);

// Autocast on for the device type (CPU, or CUDA when `cuda`) in the
// precision's dtype while alive; restores the previous autocast state on exit
// and, when the outermost guard ends, drops autocast's cache of cast weights
// (as torch.autocast does). fp32: does nothing. Wrap the forward pass only;
// backward runs outside it.
class AutocastGuard {
 public:
  AutocastGuard(Precision p, bool cuda);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The names of the tensors holding an inf or NaN, in order (one host sync).
std::vector<std::string> non_finite_names(const NamedTensors& tensors);

// One side of the numerical validation: the step's loss and every
// parameter's (unscaled) gradient.
struct PrecisionSide {
  std::string label;  // "fp32", "bf16 autocast", ...
  double loss = 0;
  NamedTensors grads;
};

// Compares the chosen precision (`low`) with fp32 from the same state:
// relative difference of the loss, of the global gradient norm and of each
// parameter's gradient norm (|low - fp32| / |fp32|), the largest ones, those
// beyond `tolerance` flagged. verdict: "ok", "flagged" (some value beyond the
// tolerance: a warning) or "non_finite" (a loss, gradient or parameter of
// either side is inf/NaN: `non_finite` names each tensor; the stage fails).
nlohmann::json compare_precision(const PrecisionSide& fp32, const PrecisionSide& low, double tolerance,
                                 const NamedTensors& parameters = {});

}  // namespace anchor::train
