#include "anchor/model/activation_checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>
#if defined(ANCHOR_WITH_CUDA)
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <mutex>
#include <utility>

namespace anchor::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor generator_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Autocast is thread-local and usually off again by the time backward runs:
// the recompute must run under the forward's settings or it computes other
// bits than the activations it replaces.
struct AutocastState {
  bool cpu = false, gpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16, gpu_dtype = at::kHalf;

  static AutocastState current() {
    AutocastState s;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.gpu = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.gpu_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
    s.cpu = at::autocast::is_cpu_enabled();
    s.gpu = at::autocast::is_enabled();
    s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    s.gpu_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
    return s;
  }

  void apply() const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, gpu);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, gpu_dtype);
#else
    at::autocast::set_cpu_enabled(cpu);
    at::autocast::set_enabled(gpu);
    at::autocast::set_autocast_cpu_dtype(cpu_dtype);
    at::autocast::set_autocast_gpu_dtype(gpu_dtype);
#endif
  }
};

// What the backward needs besides the input: the function and the state to
// replay. AutogradContext keeps only IValues; a capsule is the IValue that
// carries a C++ object, owned by the graph node and freed with it.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  bool replay_rng = true;
  at::Tensor cpu_rng;
  at::Tensor cuda_rng;  // defined when x is on a CUDA device
  c10::DeviceIndex cuda_index = -1;
  AutocastState autocast;
};

// Puts the generators to the forward-time state for the recompute and back
// to the current state afterwards, whatever happens in between.
class RngReplay {
 public:
  explicit RngReplay(const Recompute& r) : r_(r) {
    if (!r_.replay_rng) return;
    cpu_now_ = generator_state(at::detail::getDefaultCPUGenerator());
    set_generator_state(at::detail::getDefaultCPUGenerator(), r_.cpu_rng);
#if defined(ANCHOR_WITH_CUDA)
    if (r_.cuda_rng.defined()) {
      auto gen = at::cuda::detail::getDefaultCUDAGenerator(r_.cuda_index);
      cuda_now_ = generator_state(gen);
      set_generator_state(gen, r_.cuda_rng);
    }
#endif
  }
  ~RngReplay() {
    if (!r_.replay_rng) return;
    set_generator_state(at::detail::getDefaultCPUGenerator(), cpu_now_);
#if defined(ANCHOR_WITH_CUDA)
    if (cuda_now_.defined()) set_generator_state(at::cuda::detail::getDefaultCUDAGenerator(r_.cuda_index), cuda_now_);
#endif
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  const Recompute& r_;
  at::Tensor cpu_now_, cuda_now_;
};

class AutocastReplay {
 public:
  explicit AutocastReplay(const AutocastState& s) : saved_(AutocastState::current()) { s.apply(); }
  ~AutocastReplay() { saved_.apply(); }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  AutocastState saved_;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Function::apply runs this with grad mode off: fn(x) records no graph.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<Recompute> r) {
    r->cpu_rng = generator_state(at::detail::getDefaultCPUGenerator());
#if defined(ANCHOR_WITH_CUDA)
    if (x.is_cuda()) {
      r->cuda_index = x.device().index();
      r->cuda_rng = generator_state(at::cuda::detail::getDefaultCUDAGenerator(r->cuda_index));
    }
#endif
    r->autocast = AutocastState::current();
    ctx->save_for_backward({x});
    auto out = r->fn(x);
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(std::move(r));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto x = ctx->get_saved_variables().at(0);
    const auto holder = ctx->saved_data.at("recompute").toCapsule();  // keeps *r alive here
    auto* r = static_cast<Recompute*>(holder.get());
    auto xd = x.detach().requires_grad_(true);
    torch::Tensor out;
    {
      RngReplay rng(*r);
      AutocastReplay autocast(r->autocast);
      torch::AutoGradMode grad_on(true);
      out = r->fn(xd);
    }
    // Accumulates into the parameters' .grad as the plain backward would, and
    // into xd.grad: the gradient this node hands on to the previous one.
    torch::autograd::backward({out}, {grad_out.at(0)});
    return {xd.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x,
                         const CheckpointOptions& opts) {
  if (!torch::GradMode::is_enabled()) return fn(x);
  auto r = c10::make_intrusive<Recompute>();
  r->fn = fn;
  r->replay_rng = opts.replay_rng;
  // The node needs an input that requires grad or autograd never calls it;
  // the parameters inside fn are invisible to it.
  const torch::Tensor in = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return CheckpointFunction::apply(in, std::move(r));
}

}  // namespace anchor::model
