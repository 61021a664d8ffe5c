#include "anchor/measure/memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "anchor/error.hpp"

#if defined(ANCHOR_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace anchor::measure {
namespace {

// Counts live and peak bytes of every CPU tensor allocation. Each block it
// hands out is the base allocator's block with a 64-byte header in front (the
// size; 64 keeps the base's alignment), and the DataPtr's context is its data
// pointer, so the raw interface (raw_allocate/raw_deleter, which oneDNN's
// bf16 kernels use) works too.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base), base_deleter_(base->raw_deleter()) {
    if (!base_deleter_)
      throw Error(ErrorKind::kRuntime, "the CPU allocator has no raw deleter: the counting allocator cannot wrap it");
    self_ = this;
  }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return wrap(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return wrap(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  std::int64_t current() const { return current_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  static constexpr std::size_t kHeader = 64;
  static inline CountingAllocator* self_ = nullptr;  // one instance, installed once and never freed

  static void release(void* data) {
    if (!data) return;
    void* block = static_cast<char*>(data) - kHeader;
    self_->current_.fetch_sub(*static_cast<std::int64_t*>(block));
    self_->base_deleter_(block);
  }

  c10::DataPtr wrap(size_t n) const {
    void* block = base_->raw_allocate(n + kHeader);
    const auto bytes = static_cast<std::int64_t>(n);
    *static_cast<std::int64_t*>(block) = bytes;
    void* data = static_cast<char*>(block) + kHeader;
    const auto now = current_.fetch_add(bytes) + bytes;
    std::int64_t prev = peak_.load();
    while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
    }
    return c10::DataPtr(data, data, &release, c10::Device(c10::DeviceType::CPU));
  }

  c10::Allocator* base_;
  c10::DeleterFnPtr base_deleter_;
  mutable std::atomic<std::int64_t> current_{0}, peak_{0};
};

CountingAllocator* g_counting = nullptr;
std::once_flag g_once;

bool is_cuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

}  // namespace

void install_counting_allocator() {
  std::call_once(g_once, [] {
    // Leaked on purpose: tensors freed during static destruction still call it.
    g_counting = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(g_counting, /*priority=*/100);
  });
}

bool counting_allocator_installed() { return g_counting != nullptr; }

TensorMemory tensor_memory(const std::string& device) {
  TensorMemory m;
#if defined(ANCHOR_WITH_CUDA)
  if (is_cuda(device)) {
    const int dev = c10::cuda::current_device();
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    m.peak_reserved_bytes = stats.reserved_bytes[0].peak;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      m.device_total_bytes = static_cast<std::int64_t>(total_b);
      m.device_free_bytes = static_cast<std::int64_t>(free_b);
    }
    m.source = "cuda_caching_allocator";
    return m;
  }
#else
  (void)is_cuda;
  (void)device;
#endif
  if (g_counting) {
    m.allocated_bytes = g_counting->current();
    m.peak_allocated_bytes = g_counting->peak();
  }
  m.source = "counting_allocator";
  return m;
}

void reset_peak(const std::string& device) {
#if defined(ANCHOR_WITH_CUDA)
  if (is_cuda(device)) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
    return;
  }
#else
  (void)device;
#endif
  if (g_counting) g_counting->reset_peak();
}

double measured_matmul_flops(const std::string& device) {
  torch::NoGradGuard no_grad;
  const auto dev = torch::Device(device);
  const int64_t n = 512;
  // Deterministic inputs: drawing them from the global generator would shift
  // the dropout stream of the run being measured (seen in the Python bench).
  const auto opts = torch::TensorOptions().device(dev);
  auto a = torch::linspace(-1.0, 1.0, n * n, opts).reshape({n, n});
  auto b = torch::linspace(1.0, -1.0, n * n, opts).reshape({n, n});
  auto c = torch::matmul(a, b);  // warm-up
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    (void)c.sum().item<float>();  // synchronises on GPU
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

}  // namespace anchor::measure
