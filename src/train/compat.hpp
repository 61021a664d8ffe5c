#pragma once
// The one place that knows which LibTorch line we build against (1.13 on
// Debian/CI, 2.x on GPU nodes). Version-specific calls go here, behind
// TORCH_VERSION_* macros.
#include <torch/torch.h>
#include <torch/version.h>

#include <string>

namespace anchor::train::compat {

inline std::string torch_version() { return TORCH_VERSION; }

inline void set_deterministic(bool on) {
#if TORCH_VERSION_MAJOR > 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR >= 11)
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
#else
  at::globalContext().setDeterministicAlgorithms(on);
#endif
}

}  // namespace anchor::train::compat
