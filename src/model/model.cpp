#include "anchor/model/model.hpp"

#include "anchor/error.hpp"
#include "anchor/model/gpt.hpp"
#include "anchor/model/torchscript.hpp"

namespace anchor::model {

std::vector<torch::Tensor> Model::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : named_parameters()) out.push_back(p.value());
  return out;
}

std::int64_t Model::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.value().numel();
  return n;
}

namespace {

// The built-in GPT behind the interface.
class BuiltinGpt final : public Model {
 public:
  explicit BuiltinGpt(Gpt gpt) : gpt_(std::move(gpt)) {}
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const override { return gpt_->named_parameters(); }
  torch::OrderedDict<std::string, torch::Tensor> named_buffers() const override { return gpt_->named_buffers(); }
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y) override { return gpt_->loss(x, y); }
  void train(bool on) override { gpt_->train(on); }
  void to(const torch::Device& d) override { gpt_->to(d); }
  double flops_per_token(int seq_len) const override { return gpt_->flops_per_token(seq_len); }
  std::string flops_note() const override {
    return "counted: 6N (N without position embeddings) + the attention term 12 * n_layer * n_embd * seq_len";
  }
  std::string kind() const override { return "builtin"; }
  std::string attention() const override { return attention_name(gpt_->options().attention); }

 private:
  Gpt gpt_;
};

}  // namespace

std::unique_ptr<Model> make_model(const config::Config& cfg) {
  const int every = cfg.train.activation_checkpointing;
  if (cfg.model.source == "torchscript") {
    if (every > 0)
      throw Error(
          ErrorKind::kConfig,
          "train.activation_checkpointing " + std::to_string(every) +
              " is set but model.source is torchscript: anchor cannot see the blocks inside a TorchScript module",
          "set train.activation_checkpointing: 0 (a TorchScript module runs as it was saved)");
    return load_torchscript(config::resolve_path(cfg, cfg.model.torchscript), cfg.data.seq_len);
  }
  Gpt gpt(GptOptions::from(cfg.model));
  if (cfg.model.source == "safetensors") load_gpt2_safetensors(gpt, config::resolve_path(cfg, cfg.model.weights));
  gpt->set_activation_checkpointing(every);
  return std::make_unique<BuiltinGpt>(std::move(gpt));
}

}  // namespace anchor::model
