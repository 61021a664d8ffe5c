#include "anchor/measure/memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#if defined(ANCHOR_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace anchor::measure {
namespace {

// Counts live and peak bytes of every CPU tensor allocation. The DataPtr it
// hands out has the data pointer as its context (as the default CPU allocator
// does): Allocator::raw_allocate, which the TorchScript interpreter's kernels
// use, asserts exactly that. The base allocator's DataPtr and the size live in
// a table keyed by the pointer until release() frees them.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

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
  struct Live {
    c10::DataPtr inner;
    std::int64_t bytes;
  };

  static void release(void* p);

  c10::DataPtr wrap(size_t n) const {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes: nothing to count
    auto device = inner.device();
    const auto bytes = static_cast<std::int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.emplace(data, Live{std::move(inner), bytes});
    }
    const auto now = current_.fetch_add(bytes) + bytes;
    std::int64_t prev = peak_.load();
    while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
    }
    return c10::DataPtr(data, data, &release, device);
  }

  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> current_{0}, peak_{0};
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, Live> live_;
};

CountingAllocator* g_counting = nullptr;
std::once_flag g_once;

void CountingAllocator::release(void* p) {
  if (p == nullptr) return;
  Live gone;
  {
    std::lock_guard<std::mutex> lock(g_counting->mu_);
    auto it = g_counting->live_.find(p);
    if (it == g_counting->live_.end()) return;
    gone = std::move(it->second);
    g_counting->live_.erase(it);
  }
  g_counting->current_.fetch_sub(gone.bytes);
  // gone.inner frees through the base allocator's deleter here, outside the lock.
}

bool is_cuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

#if defined(ANCHOR_WITH_CUDA)
// c10's CUDA caching allocator (HIP's in a ROCm build) and the driver's view.
class CudaStatsSource final : public DeviceStatsSource {
 public:
  DeviceAllocatorStats read(int index) override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    DeviceAllocatorStats out;
    // [0] is StatType::AGGREGATE: small and large pools together.
    out.allocated_bytes = stats.allocated_bytes[0].current;
    out.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    out.reserved_bytes = stats.reserved_bytes[0].current;
    out.peak_reserved_bytes = stats.reserved_bytes[0].peak;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      out.total_bytes = static_cast<std::int64_t>(total_b);
      out.free_bytes = static_cast<std::int64_t>(free_b);
    }
    return out;
  }
  void reset_peak(int index) override { c10::cuda::CUDACachingAllocator::resetPeakStats(index); }
  void release_cached() override { c10::cuda::CUDACachingAllocator::emptyCache(); }
};

DeviceStatsSource* build_source() {
  static CudaStatsSource source;
  return &source;
}
#else
DeviceStatsSource* build_source() { return nullptr; }
#endif

DeviceStatsSource* g_source = build_source();

// "cuda:N" -> N; "cuda" -> the current device (0 without a source that knows better).
int device_index(const std::string& device) {
  const auto colon = device.find(':');
  if (colon != std::string::npos) return std::stoi(device.substr(colon + 1));
#if defined(ANCHOR_WITH_CUDA)
  if (g_source == build_source()) return c10::cuda::current_device();
#endif
  return 0;
}

}  // namespace

DeviceStatsSource* device_stats_source() { return g_source; }
void set_device_stats_source(DeviceStatsSource* source) { g_source = source ? source : build_source(); }

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
  if (is_cuda(device) && g_source) {
    const auto d = g_source->read(device_index(device));
    m.allocated_bytes = d.allocated_bytes;
    m.peak_allocated_bytes = d.peak_allocated_bytes;
    m.reserved_bytes = d.reserved_bytes;
    m.peak_reserved_bytes = d.peak_reserved_bytes;
    m.device_total_bytes = d.total_bytes;
    m.device_free_bytes = d.free_bytes;
    m.source = "cuda_caching_allocator";
    return m;
  }
  if (g_counting) {
    m.allocated_bytes = g_counting->current();
    m.peak_allocated_bytes = g_counting->peak();
  }
  m.source = "counting_allocator";
  return m;
}

void reset_peak(const std::string& device) {
  if (is_cuda(device) && g_source) {
    g_source->reset_peak(device_index(device));
    return;
  }
  if (g_counting) g_counting->reset_peak();
}

void release_cached(const std::string& device) {
  if (is_cuda(device) && g_source) g_source->release_cached();
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
