#pragma once
// What the trainer needs of a model, whoever wrote it: the built-in GPT
// (gpt.hpp) and a user's TorchScript module (torchscript.hpp) are the two
// implementations. The optimizer, the checkpoint (by name), the state digest,
// eval and the pilot see only this interface.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "anchor/config/config.hpp"

namespace anchor::model {

class Model {
 public:
  virtual ~Model() = default;

  // Every parameter / buffer under a stable, unique name, in a stable order
  // (the module's registration order): the checkpoint and the optimizer key on
  // these names. The tensors alias the model's own (in-place updates stick).
  virtual torch::OrderedDict<std::string, torch::Tensor> named_parameters() const = 0;
  virtual torch::OrderedDict<std::string, torch::Tensor> named_buffers() const = 0;
  // Mean loss of the batch: inputs and targets are int64 [B, T] on the model's
  // device. Returns a 0-dim floating tensor; throws Error (kConfig) if the
  // model returns anything else.
  virtual torch::Tensor loss(const torch::Tensor& inputs, const torch::Tensor& targets) = 0;
  // Training mode (dropout on) or evaluation mode.
  virtual void train(bool on = true) = 0;
  void eval() { train(false); }
  virtual void to(const torch::Device& device) = 0;
  // Forward FLOPs per token for MFU; see flops_note().
  virtual double flops_per_token(int seq_len) const = 0;
  // How flops_per_token was obtained ("exact count" or an estimate and why).
  virtual std::string flops_note() const = 0;
  // "builtin" or "torchscript" (model.source; safetensors weights are builtin).
  virtual std::string kind() const = 0;
  // How attention is computed: "sdpa" or "manual" for the built-in GPT
  // (model.attention resolved); "module" for a TorchScript module (its own).
  virtual std::string attention() const = 0;

  std::vector<torch::Tensor> parameters() const;
  std::int64_t num_parameters() const;
};

// The model the config asks for: model.source builtin (initialised from the
// default CPU generator, which the caller seeds), safetensors (the built-in
// architecture with model.weights) or torchscript (model.torchscript, see
// docs/models.md). train.activation_checkpointing N > 0 recomputes every N-th
// block of the built-in GPT in backward; a TorchScript module is opaque, so
// N > 0 with it throws Error (kConfig). Errors in the weights or the module
// throw Error (kConfig) naming the file.
std::unique_ptr<Model> make_model(const config::Config& cfg);

}  // namespace anchor::model
