#pragma once
// The one place that knows which LibTorch line we build against (1.13 on
// Debian/CI, 2.x on GPU nodes). Version-specific calls go here, behind
// TORCH_VERSION_* macros.
#include <torch/torch.h>
#include <torch/version.h>

#include <string>

#include "anchor/error.hpp"

namespace anchor::train::compat {

inline std::string torch_version() { return TORCH_VERSION; }

// "cpu", "cuda", "cuda:N", "rocm" (HIP builds expose it as cuda), "auto".
inline torch::Device resolve_device(const std::string& name) {
  std::string n = name == "rocm" ? "cuda" : name;
  if (n == "auto") n = torch::cuda::is_available() ? "cuda" : "cpu";
  if (n.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      throw Error(ErrorKind::kConfig, "device '" + name + "' requested, but this LibTorch (" + torch_version() +
                                          ") sees no CUDA/HIP device",
                  "use device: cpu here, or build against a CUDA/ROCm LibTorch on a GPU node (docs/gpu.md)");
    if (n == "cuda") n = "cuda:0";
  }
  return torch::Device(n);
}

inline void set_deterministic(bool on) {
#if TORCH_VERSION_MAJOR > 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR >= 11)
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
#else
  at::globalContext().setDeterministicAlgorithms(on);
#endif
}

}  // namespace anchor::train::compat
