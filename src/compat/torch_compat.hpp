#pragma once
// The one place that knows which LibTorch line we build against (1.13 on
// Debian/CI, 2.x on GPU nodes). Version-specific calls go here, behind
// TORCH_VERSION_* macros.
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>
#if defined(ANCHOR_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

#include <cstdlib>
#include <string>

#include "anchor/error.hpp"

namespace anchor::compat {

inline std::string torch_version() { return TORCH_VERSION; }

// An exception's message for a person: LibTorch's own errors (c10::Error)
// carry a C++ backtrace in what(), some thirty lines that say nothing to a
// user and bury the one that does; this drops it.
inline std::string message_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// Why this process cannot use a CUDA device: "" when it can.
inline std::string cuda_unavailable_reason() {
#if defined(ANCHOR_WITH_CUDA)
  // Without the driver library the runtime says "driver version is
  // insufficient", which misleads on a machine that has no driver at all.
  // (Left loaded when found: unloading the driver library is not supported.)
  if (::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr)
    return "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  return n > 0 && torch::cuda::is_available() ? "" : "no CUDA device is visible";
#else
  return "this LibTorch is built without CUDA";
#endif
}

// "cpu", "cuda", "cuda:N", "rocm" (HIP builds expose it as cuda), "auto".
inline torch::Device resolve_device(const std::string& name) {
  std::string n = name == "rocm" ? "cuda" : name;
  if (n == "auto") n = torch::cuda::is_available() ? "cuda" : "cpu";
  if (n.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
#if defined(ANCHOR_WITH_CUDA)
      throw Error(ErrorKind::kConfig,
                  "device '" + name + "' requested, but this LibTorch (" + torch_version() +
                      ", built with CUDA) can use no device: " + cuda_unavailable_reason(),
                  "check that nvidia-smi (or rocm-smi) lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it; "
                  "on a machine without a GPU use device: cpu");
#else
      throw Error(ErrorKind::kConfig,
                  "device '" + name + "' requested, but this LibTorch (" + torch_version() +
                      ") is built without CUDA/HIP: " + cuda_unavailable_reason(),
                  "use device: cpu here, or build against a CUDA/ROCm LibTorch on a GPU node (docs/development.md)");
#endif
    }
    if (n == "cuda") n = "cuda:0";
  }
  return torch::Device(n);
}

// Waits until the device has run what was queued on it, so that a timer read
// next covers the kernels, not just their launches (CUDA is asynchronous: the
// optimizer step's kernels are still running when its call returns). A no-op
// on the CPU.
inline void synchronize(const torch::Device& device) {
#if defined(ANCHOR_WITH_CUDA)
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device.index());
    c10::cuda::device_synchronize();
  }
#else
  (void)device;
#endif
}

// Scaled dot-product attention through at::scaled_dot_product_attention
// (LibTorch 2.0 on; flash or memory-efficient kernels on a GPU, a fused
// kernel on the CPU), scale 1/sqrt(head_dim). q, k, v: [B, heads, T,
// head_dim]. LibTorch 1.13 has only a private variant: the built-in GPT
// writes attention out there (model.attention, docs/models.md).
#if TORCH_VERSION_MAJOR >= 2
inline constexpr bool kHasSdpa = true;
inline torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout_p,
                          bool causal) {
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, causal);
}
#else
inline constexpr bool kHasSdpa = false;
inline torch::Tensor sdpa(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double, bool) {
  throw Error(ErrorKind::kConfig, "model.attention sdpa needs LibTorch 2.0 or newer; this is " + torch_version(),
              "use model.attention: manual (or auto), or build against PyTorch 2.x (make torch2)");
}
#endif

// Deterministic algorithms (run.deterministic). On a GPU cuBLAS is
// deterministic only with a fixed workspace: with deterministic algorithms on,
// LibTorch refuses every cuBLAS call unless CUBLAS_WORKSPACE_CONFIG is
// :4096:8 or :16:8. It is read when a cuBLAS handle is made, so it is set
// here, before the model reaches the device; a value the user set is kept.
inline void set_deterministic(bool on) {
  if (on) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
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

}  // namespace anchor::compat
