#pragma once
// The one place that knows which LibTorch line we build against (1.13 on
// Debian/CI, 2.x on GPU nodes). Version-specific calls go here, behind
// TORCH_VERSION_* macros.
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>

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
                  "use device: cpu here, or build against a CUDA/ROCm LibTorch on a GPU node (docs/development.md)");
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

// Autocast state of one device type (CPU or CUDA). LibTorch 2.4 made the
// calls device-generic and deprecated the per-device ones 1.13 has.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocast_enabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
}
inline at::ScalarType autocast_dtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
}
inline void set_autocast(bool cuda, bool enabled, at::ScalarType dtype) {
  const auto d = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  at::autocast::set_autocast_dtype(d, dtype);
  at::autocast::set_autocast_enabled(d, enabled);
}
#else
inline bool autocast_enabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
inline at::ScalarType autocast_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
inline void set_autocast(bool cuda, bool enabled, at::ScalarType dtype) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
}
#endif

}  // namespace anchor::train::compat
