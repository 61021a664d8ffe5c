#include "anchor/model/gpt.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/model/torch_tensors.hpp"
#include "anchor/error.hpp"
#include "compat/torch_compat.hpp"

namespace anchor::model {

const char* attention_name(Attention a) { return a == Attention::kSdpa ? "sdpa" : "manual"; }

GptOptions GptOptions::from(const config::ModelConfig& m) {
  GptOptions o;
  if (m.attention == "sdpa" && !compat::kHasSdpa)
    throw Error(ErrorKind::kConfig,
                "model.attention sdpa needs LibTorch 2.0 or newer; this is " + compat::torch_version(),
                "use model.attention: manual (or auto), or build against PyTorch 2.x (make torch2)");
  o.attention =
      m.attention == "sdpa" || (m.attention == "auto" && compat::kHasSdpa) ? Attention::kSdpa : Attention::kManual;
  o.n_layer = m.n_layer;
  o.n_head = m.n_head;
  o.n_embd = m.n_embd;
  o.vocab_size = m.vocab_size;
  o.block_size = m.block_size;
  o.dropout = m.dropout;
  o.bias = m.bias;
  return o;
}

BlockImpl::BlockImpl(const GptOptions& o) : o_(o) {
  auto lin = [&](int in, int out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(o.bias)); };
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd}).eps(1e-5)));
  // Registered under GPT-2's names: h.N.attn.c_attn / h.N.attn.c_proj / h.N.mlp.c_fc / h.N.mlp.c_proj.
  auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
  c_attn = attn->register_module("c_attn", lin(o.n_embd, 3 * o.n_embd));
  attn_proj = attn->register_module("c_proj", lin(o.n_embd, o.n_embd));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd}).eps(1e-5)));
  auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
  c_fc = mlp->register_module("c_fc", lin(o.n_embd, 4 * o.n_embd));
  mlp_proj = mlp->register_module("c_proj", lin(4 * o.n_embd, o.n_embd));
  attn_drop = register_module("attn_drop", torch::nn::Dropout(o.dropout));
  resid_drop = register_module("resid_drop", torch::nn::Dropout(o.dropout));
}

torch::Tensor BlockImpl::attention(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  const auto hd = C / o_.n_head;
  auto qkv = c_attn->forward(x).split(C, /*dim=*/2);
  auto q = qkv[0].view({B, T, o_.n_head, hd}).transpose(1, 2);
  auto k = qkv[1].view({B, T, o_.n_head, hd}).transpose(1, 2);
  auto v = qkv[2].view({B, T, o_.n_head, hd}).transpose(1, 2);
  torch::Tensor y;
  if (o_.attention == Attention::kSdpa) {
    // The same scale (1/sqrt(hd)) and causal mask; dropout on the attention
    // weights happens inside, from the same generator, only while training.
    y = compat::sdpa(q, k, v, is_training() ? o_.dropout : 0.0, /*causal=*/true);
  } else {
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    // A float -inf mask (not a bool mask: see LIBTORCH_NOTES.md), built on the input's device.
    auto mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    att = att.masked_fill(mask, -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    att = attn_drop->forward(att);
    y = torch::matmul(att, v);
  }
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return resid_drop->forward(attn_proj->forward(y));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attention(ln_1->forward(x));
  auto m = mlp_proj->forward(torch::gelu(c_fc->forward(ln_2->forward(h)), "tanh"));
  return h + resid_drop->forward(m);
}

GptImpl::GptImpl(const GptOptions& o) : o_(o) {
  if (o.n_embd % o.n_head != 0) throw Error(ErrorKind::kConfig, "model.n_embd must be divisible by model.n_head");
  wte = register_module("wte", torch::nn::Embedding(o.vocab_size, o.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(o.block_size, o.n_embd));
  drop = register_module("drop", torch::nn::Dropout(o.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int i = 0; i < o.n_layer; ++i) h->push_back(Block(o));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd}).eps(1e-5)));
  init_weights();
}

void GptImpl::init_weights() {
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * o_.n_layer);
  for (auto& p : named_parameters()) {
    const std::string& n = p.key();
    auto& t = p.value();
    const bool is_ln = n.find("ln_") != std::string::npos;
    if (is_ln) {
      if (n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0)
        t.fill_(1.0);
      else
        t.zero_();
    } else if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (n.find("c_proj.weight") != std::string::npos) {
      t.normal_(0.0, resid_std);
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx) {
  const auto T = idx.size(1);
  if (T > o_.block_size)
    throw Error(ErrorKind::kConfig,
                "sequence length " + std::to_string(T) + " exceeds model.block_size " + std::to_string(o_.block_size));
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = drop->forward(wte->forward(idx) + wpe->forward(pos));
  int n = 0;  // blocks counted from 1: with every = N, blocks N, 2N, ... are recomputed
  for (auto& m : *h) {
    auto* block = m->as<BlockImpl>();
    ++n;
    if (ckpt_every_ > 0 && n % ckpt_every_ == 0)
      x = checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, x, ckpt_opts_);
    else
      x = block->forward(x);
  }
  x = ln_f->forward(x);
  return torch::matmul(x, wte->weight.t());  // tied LM head
}

torch::Tensor GptImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto logits = forward(idx);
  return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

double GptImpl::flops_per_token(int seq_len) const {
  const double n = static_cast<double>(num_parameters() - wpe->weight.numel());
  return 6.0 * n + 12.0 * o_.n_layer * o_.n_embd * static_cast<double>(seq_len);
}

void GptImpl::set_activation_checkpointing(int every, const CheckpointOptions& opts) {
  if (every < 0) throw Error(ErrorKind::kConfig, "train.activation_checkpointing must be >= 0");
  ckpt_every_ = every;
  ckpt_opts_ = opts;
}

std::int64_t GptImpl::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

namespace {

torch::ScalarType float_dtype(checkpoint::DType d) {
  if (d != checkpoint::DType::F32 && d != checkpoint::DType::F16 && d != checkpoint::DType::BF16 &&
      d != checkpoint::DType::F64)
    throw Error(ErrorKind::kConfig, "GPT-2 weights must be floating point (F32, F16, BF16 or F64)");
  return model::torch_dtype(d);
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

namespace {

// What the file says the sizes are (wte [vocab, n_embd], wpe [block, n_embd],
// the h.N blocks), for the hint of a mismatch; n_head is not in the weights.
// A file whose c_attn weight is [3 n_embd, n_embd] is in torch's Linear
// orientation: anchor's own checkpoint, not a GPT-2 export.
std::string sizes_hint(const std::map<std::string, const checkpoint::SafetensorsFile::Entry*>& by_name) {
  auto shape = [&](const std::string& n) -> std::vector<std::int64_t> {
    auto it = by_name.find(n);
    return it == by_name.end() ? std::vector<std::int64_t>{} : it->second->shape;
  };
  const auto wte = shape("wte.weight"), wpe = shape("wpe.weight"), c_attn = shape("h.0.attn.c_attn.weight");
  if (wte.size() != 2 || wpe.size() != 2)
    return "model.weights must be GPT-2 weights in Hugging Face's layout (wte.weight, wpe.weight, h.N.*, ln_f.*), "
           "such as a run's export/model.safetensors";
  if (c_attn.size() == 2 && c_attn[0] == 3 * wte[1] && c_attn[1] == wte[1])
    return "this file is in torch's [out, in] orientation, as anchor's checkpoints are: give model.weights the "
           "run's export/model.safetensors (GPT-2's layout), or continue from the checkpoint with "
           "pilot.start_from: latest";
  std::set<std::string> blocks;
  for (const auto& [n, e] : by_name)
    if (n.rfind("h.", 0) == 0) blocks.insert(n.substr(2, n.find('.', 2) - 2));
  return "the file holds n_layer " + std::to_string(blocks.size()) + ", n_embd " + std::to_string(wte[1]) +
         ", vocab_size " + std::to_string(wte[0]) + ", block_size " + std::to_string(wpe[0]) +
         ": set those in model (and n_head as the weights were trained with; it divides n_embd)";
}

}  // namespace

void load_gpt2_safetensors(Gpt& model, const std::string& path) {
  // The reader's hint names no policy; a weights file is not a checkpoint
  // (nothing falls back to an older one): say what fits a downloaded file.
  auto file = [&] {
    try {
      return checkpoint::SafetensorsFile::open(path);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kVerification) throw;
      throw Error(e.kind(), std::string("model.weights ") + e.what(),
                  "check the file: a download cut short or a file in another format (a PyTorch .bin, a "
                  ".gguf) is not a safetensors file. Re-download it (and compare its SHA-256 with the "
                  "publisher's), or convert it to safetensors; model.weights names it");
    }
  }();
  std::map<std::string, const checkpoint::SafetensorsFile::Entry*> by_name;
  for (const auto& e : file.entries()) {
    std::string n = e.name;
    if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
    by_name[n] = &e;
  }
  // Conv1D weights in GPT-2 are [in, out]; ours are [out, in].
  auto is_conv1d = [](const std::string& n) {
    return n.find(".weight") != std::string::npos &&
           (n.find("attn.c_attn") != std::string::npos || n.find("attn.c_proj") != std::string::npos ||
            n.find("mlp.c_fc") != std::string::npos || n.find("mlp.c_proj") != std::string::npos);
  };
  std::vector<std::string> problems;
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const std::string& n = p.key();
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      problems.push_back(n + ": missing from the file");
      continue;
    }
    const auto& e = *it->second;
    std::vector<std::int64_t> want = p.value().sizes().vec();
    if (is_conv1d(n) && want.size() == 2) std::swap(want[0], want[1]);
    if (e.shape != want) {
      problems.push_back(n + ": expected shape " + shape_str(want) + " from the config, found " + shape_str(e.shape));
      continue;
    }
    auto t = torch::from_blob(const_cast<std::uint8_t*>(file.data(e)), e.shape,
                              torch::TensorOptions().dtype(float_dtype(e.dtype)));
    if (is_conv1d(n)) t = t.t();
    p.value().copy_(t.to(p.value().dtype()));
  }
  if (!problems.empty()) {
    std::string msg =
        "weights " + path + " do not match the model config (" + std::to_string(problems.size()) + " problems):";
    for (const auto& pr : problems) msg += "\n  " + pr;
    throw Error(ErrorKind::kConfig, msg, sizes_hint(by_name));
  }
}

}  // namespace anchor::model
