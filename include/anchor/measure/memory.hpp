#pragma once
// Tensor memory: current and peak bytes, reset before a measured region.
//
// On CPU, LibTorch has no allocator statistics; install_counting_allocator()
// puts a counting allocator in front of the default CPU allocator
// (c10::SetCPUAllocator) so every tensor allocation is seen and the figures
// are exact. BLAS/oneDNN scratch is invisible to it: proc.hpp's RSS figures
// cover that. On CUDA/HIP builds the caching allocator's own statistics are
// used (allocated and reserved, current and peak). No torch in this header.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "anchor/measure/proc.hpp"

namespace anchor::measure {

struct TensorMemory {
  std::int64_t allocated_bytes = 0;       // live tensor bytes now
  std::int64_t peak_allocated_bytes = 0;  // since the last reset_peak()
  std::int64_t reserved_bytes = -1;       // caching allocator (GPU); -1 on CPU
  std::int64_t peak_reserved_bytes = -1;
  std::int64_t device_total_bytes = -1;  // GPU total memory; -1 on CPU
  std::int64_t device_free_bytes = -1;
  std::string source;  // "counting_allocator" | "cuda_caching_allocator"
};

// The figures as the worker reports them (a stage's `memory`, the step's
// `step_memory`): allocated and peak always; reserved and the device's total
// and free bytes when known (a GPU); the process's RSS and peak RSS.
nlohmann::json memory_json(const TensorMemory& tensors, const ProcMemory& process);

// Idempotent. Call before the tensors to be measured are allocated.
void install_counting_allocator();
bool counting_allocator_installed();

// `device` is "cpu", "cuda" (the current GPU) or "cuda:N" (as the trainer
// resolved it). A GPU's figures come from the device stats source below.
TensorMemory tensor_memory(const std::string& device);
// Peak := current (as torch.cuda.reset_peak_memory_stats).
void reset_peak(const std::string& device);
// A GPU: hands the caching allocator's unused blocks back to the driver (as
// torch.cuda.empty_cache), so the next reserved peak is not the pool an
// earlier step grew. The CPU: nothing to do.
void release_cached(const std::string& device);

// What a GPU's caching allocator and driver report for one device.
struct DeviceAllocatorStats {
  std::int64_t allocated_bytes = 0, peak_allocated_bytes = 0;
  std::int64_t reserved_bytes = 0, peak_reserved_bytes = 0;
  std::int64_t total_bytes = -1, free_bytes = -1;  // -1: not known
};

// Where tensor_memory() and reset_peak() read a GPU's figures: in a CUDA (or
// HIP) build, c10's caching allocator statistics (allocated and reserved,
// current and peak; the counters torch.cuda.max_memory_allocated() reads) and
// cudaMemGetInfo; none in a CPU build. The seam lets a test run what is built
// on these figures (the device index, the fields, the report) without a GPU.
class DeviceStatsSource {
 public:
  virtual ~DeviceStatsSource() = default;
  virtual DeviceAllocatorStats read(int device_index) = 0;
  virtual void reset_peak(int device_index) = 0;
  virtual void release_cached() {}
};
// The source in use (nullptr in a CPU build unless a test set one).
DeviceStatsSource* device_stats_source();
// Replaces the source; nullptr restores this build's own. Set it before
// measuring, not while another thread measures.
void set_device_stats_source(DeviceStatsSource* source);

// A quick measured matmul throughput (FLOP/s) of this device at the current
// thread count: the reference for the CPU MFU estimate.
double measured_matmul_flops(const std::string& device);

}  // namespace anchor::measure
