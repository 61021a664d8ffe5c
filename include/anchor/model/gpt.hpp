#pragma once
// The built-in GPT family: decoder-only, pre-LayerNorm, GELU (tanh), dropout,
// causal self-attention either through torch's scaled_dot_product_attention
// (LibTorch 2.x: flash / memory-efficient kernels on a GPU) or written out by
// hand (the same on LibTorch 1.13 and 2.x; model.attention). Parameter names follow Hugging Face's GPT-2 layout
// (wte, wpe, h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2,
// h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f); the LM head is tied to wte.
// Linear weights are stored [out, in] as torch::nn::Linear does; the loader
// transposes GPT-2's Conv1D [in, out] weights.
#include <torch/torch.h>

#include <string>

#include "anchor/config/config.hpp"
#include "anchor/model/activation_checkpoint.hpp"

namespace anchor::model {

enum class Attention { kManual, kSdpa };
const char* attention_name(Attention a);  // "manual" | "sdpa"

struct GptOptions {
  int n_layer = 2, n_head = 4, n_embd = 64, vocab_size = 256, block_size = 64;
  double dropout = 0.1;
  bool bias = true;
  Attention attention = Attention::kManual;
  // model.attention auto resolves to sdpa where this LibTorch has it (2.0 on),
  // else manual. Throws Error (kConfig) for sdpa on a LibTorch without it.
  static GptOptions from(const config::ModelConfig& m);
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptOptions& o);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::Tensor attention(const torch::Tensor& x);
  GptOptions o_;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
  torch::nn::Dropout attn_drop{nullptr}, resid_drop{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptOptions& o);
  // idx: [B, T] int64. Returns logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross-entropy of forward(idx) against targets [B, T].
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);
  const GptOptions& options() const { return o_; }
  // Forward FLOPs per token (6N + attention term, as in the PaLM appendix), for MFU.
  double flops_per_token(int seq_len) const;
  std::int64_t num_parameters() const;
  // Activation checkpointing (activation_checkpoint.hpp): every `every`-th block
  // (blocks every, 2*every, ... counting from 1) is recomputed in backward;
  // 0 turns it off. Gradients are bitwise those of the plain run on CPU.
  void set_activation_checkpointing(int every, const CheckpointOptions& opts = {});
  int activation_checkpointing() const { return ckpt_every_; }

  // Re-initialises every parameter as GPT-2 does (normal 0.02, residual
  // projections scaled by 1/sqrt(2 n_layer), zeros, LayerNorm ones) from the
  // default CPU generator, which the caller seeds.
  void init_weights();

 private:
  GptOptions o_;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  int ckpt_every_ = 0;
  CheckpointOptions ckpt_opts_;
};
TORCH_MODULE(Gpt);

// Loads weights from a .safetensors file in Hugging Face's GPT-2 layout
// (optionally prefixed "transformer."). Checks every tensor's shape against the
// config; throws Error (kConfig) naming the tensor, the expected and the found
// shape, or a tensor that is missing. Ignores attn.bias / attn.masked_bias
// buffers and lm_head.weight (tied).
void load_gpt2_safetensors(Gpt& model, const std::string& path);

}  // namespace anchor::model
