#pragma once
// For tests that need a GPU (ctest label `gpu`, tests/gpu/). Each one starts
// with ANCHOR_SKIP_WITHOUT_GPU(): it skips, saying why, when this process can
// use no CUDA device (a LibTorch built without CUDA, as Debian's; or a CUDA
// build on a machine without a GPU or driver, as CI), and runs otherwise
// (scripts/gpu-check.sh runs them on a GPU node). The reason is checked, not
// assumed: it is what LibTorch and the CUDA runtime answer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "compat/torch_compat.hpp"

namespace anchor::testing {

// "" when a CUDA device is usable here, else why not.
inline std::string no_gpu_reason() {
  if (torch::cuda::is_available()) return "";
  return "no usable CUDA device (LibTorch " + compat::torch_version() + "): " + compat::cuda_unavailable_reason();
}

}  // namespace anchor::testing

#define ANCHOR_SKIP_WITHOUT_GPU()                                          \
  do {                                                                     \
    const std::string anchor_no_gpu_ = ::anchor::testing::no_gpu_reason(); \
    if (!anchor_no_gpu_.empty()) GTEST_SKIP() << anchor_no_gpu_;           \
  } while (0)
