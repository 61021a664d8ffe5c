// The one TU that includes the jit headers (<torch/script.h>).
#include "anchor/model/torchscript.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <mutex>
#include <sstream>

#include "anchor/error.hpp"

namespace anchor::model {
namespace {

const char* const kContract =
    "docs/models.md: forward(self, inputs: Tensor, targets: Tensor) -> Tensor returning "
    "the mean loss as a 0-dim tensor, saved with torch.jit.script(model).save(path)";

[[noreturn]] void contract_error(const std::string& path, const std::string& why, const std::string& hint = kContract) {
  throw Error(ErrorKind::kConfig, "model.torchscript '" + path + "': " + why, hint);
}

bool is_tensor_type(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

class TorchScriptModel final : public Model {
 public:
  // A Module is a handle to its object: the copy shares it (LibTorch 1.13's Module has no move constructor).
  TorchScriptModel(const torch::jit::Module& m, std::string path) : m_(m), path_(std::move(path)) {}

  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const override {
    torch::OrderedDict<std::string, torch::Tensor> out;
    for (const auto& p : m_.named_parameters(/*recurse=*/true)) out.insert(p.name, p.value);
    return out;
  }
  torch::OrderedDict<std::string, torch::Tensor> named_buffers() const override {
    torch::OrderedDict<std::string, torch::Tensor> out;
    for (const auto& b : m_.named_buffers(/*recurse=*/true)) out.insert(b.name, b.value);
    return out;
  }

  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y) override {
    // The graph executor's optimisations swap the graph after its profiling
    // runs (and may differentiate symbolically): the first and the later calls,
    // and so a fresh process and a long-running one, could compute other bits.
    // Unoptimised, every call runs the same ops through autograd, as eager does.
    torch::jit::GraphOptimizerEnabledGuard plain(false);
    auto out = m_.forward({x, y});
    return check_loss(out, x);
  }

  void train(bool on) override { m_.train(on); }
  void to(const torch::Device& d) override { m_.to(d); }
  double flops_per_token(int /*seq_len*/) const override { return 6.0 * static_cast<double>(num_parameters()); }
  std::string flops_note() const override {
    return "estimated as 6N (N = all parameters): anchor does not look inside a TorchScript module, so attention "
           "and embedding lookups are not counted separately";
  }
  std::string kind() const override { return "torchscript"; }
  std::string attention() const override { return "module"; }

  torch::Tensor check_loss(const c10::IValue& out, const torch::Tensor& x) const {
    if (!out.isTensor())
      contract_error(path_, "forward returned a " + out.tagKind() + ", not a Tensor",
                     std::string("return only the loss tensor; ") + kContract);
    auto t = out.toTensor();
    if (t.dim() != 0) {
      std::ostringstream os;
      os << "forward returned a tensor of shape " << t.sizes() << " for inputs of shape " << x.sizes()
         << ", not a scalar loss";
      contract_error(path_, os.str(),
                     std::string("reduce it to the mean loss (e.g. F.cross_entropy(..., "
                                 "reduction='mean')); ") +
                         kContract);
    }
    if (!t.is_floating_point())
      contract_error(path_, std::string("forward returned a ") + c10::toString(t.scalar_type()) +
                                " scalar, not a floating-point loss");
    return t;
  }

 private:
  mutable torch::jit::Module m_;
  std::string path_;
};

void check_signature(const torch::jit::Module& m, const std::string& path) {
  auto method = m.find_method("forward");
  if (!method) contract_error(path, "the module has no forward method");
  const auto& schema = method->function().getSchema();
  const auto& args = schema.arguments();  // args[0] is self
  if (args.size() != 3) {
    std::ostringstream os;
    os << "forward takes " << (args.empty() ? 0 : args.size() - 1) << " argument(s) (" << schema
       << "); anchor calls forward(inputs, targets) and trains on the loss it returns";
    contract_error(path, os.str());
  }
  for (std::size_t i = 1; i < args.size(); ++i)
    if (!is_tensor_type(args[i].type()))
      contract_error(path, "forward's argument '" + args[i].name() + "' is " + args[i].type()->str() +
                               "; anchor passes int64 token tensors (inputs, targets)");
  if (schema.returns().size() != 1 || !is_tensor_type(schema.returns()[0].type())) {
    std::ostringstream os;
    os << "forward returns ";
    if (schema.returns().size() == 1)
      os << schema.returns()[0].type()->str();
    else
      os << schema.returns().size() << " values";
    os << ", not a Tensor";
    contract_error(path, os.str(), std::string("return only the scalar loss; ") + kContract);
  }
}

}  // namespace

std::unique_ptr<Model> load_torchscript(const std::string& path, int probe_seq_len) {
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw Error(ErrorKind::kConfig, "model.torchscript '" + path + "': cannot load it as a TorchScript module: " + what,
                "torch.save(model) writes a pickle, not TorchScript: save it with "
                "torch.jit.script(model).save(path) (docs/models.md)");
  }
  check_signature(m, path);

  int trainable = 0;
  for (const auto& p : m.named_parameters(/*recurse=*/true)) trainable += p.value.requires_grad() ? 1 : 0;
  if (trainable == 0)
    contract_error(path, "the module has no trainable parameters (none registered, or all with requires_grad=False)",
                   "register the weights as nn.Parameter (nn.Linear, nn.Embedding, ...) with requires_grad=True "
                   "(docs/models.md)");

  auto model = std::make_unique<TorchScriptModel>(m, path);
  if (probe_seq_len > 0) {
    // One call to see what forward returns, before any training: eval mode,
    // no graph, and the CPU generator as it was (the run's dropout stream
    // must not depend on this check).
    auto gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    torch::NoGradGuard no_grad;
    model->train(false);
    auto x = torch::zeros({1, probe_seq_len}, torch::kInt64);
    try {
      model->loss(x, x);
    } catch (const c10::Error& e) {
      std::string what = e.what_without_backtrace();
      if (what.size() > 600) what.resize(600);
      contract_error(path, "forward failed on a [1, " + std::to_string(probe_seq_len) +
                               "] batch of token ids (data.seq_len): " + what);
    }
    model->train(true);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  return model;
}

}  // namespace anchor::model
