#pragma once
// Tensor memory: current and peak bytes, reset before a measured region.
//
// On CPU, LibTorch has no allocator statistics; install_counting_allocator()
// puts a counting allocator in front of the default CPU allocator
// (c10::SetCPUAllocator) so every tensor allocation is seen and the figures
// are exact. BLAS/oneDNN scratch is invisible to it: proc.hpp's RSS figures
// cover that. On CUDA/HIP builds the caching allocator's own statistics are
// used (allocated and reserved, current and peak). No torch in this header.
#include <cstdint>
#include <string>

namespace anchor::measure {

struct TensorMemory {
  std::int64_t allocated_bytes = 0;       // live tensor bytes now
  std::int64_t peak_allocated_bytes = 0;  // since the last reset_peak()
  std::int64_t reserved_bytes = -1;       // caching allocator (GPU); -1 on CPU
  std::int64_t peak_reserved_bytes = -1;
  std::int64_t device_total_bytes = -1;   // GPU total memory; -1 on CPU
  std::int64_t device_free_bytes = -1;
  std::string source;                     // "counting_allocator" | "cuda_caching_allocator"
};

// Idempotent. Call before the tensors to be measured are allocated.
void install_counting_allocator();
bool counting_allocator_installed();

// `device` is "cpu" or "cuda:N" (as the trainer resolved it).
TensorMemory tensor_memory(const std::string& device);
// Peak := current (as torch.cuda.reset_peak_memory_stats).
void reset_peak(const std::string& device);

// A quick measured matmul throughput (FLOP/s) of this device at the current
// thread count: the reference for the CPU MFU estimate.
double measured_matmul_flops(const std::string& device);

}  // namespace anchor::measure
