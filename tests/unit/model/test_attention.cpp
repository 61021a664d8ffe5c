// model.attention (docs/models.md): the built-in GPT's causal self-attention
// through torch's scaled_dot_product_attention (LibTorch 2.x) agrees with the
// written-out attention on the CPU within a stated tolerance, forward and
// gradients; the negative control (attention that is not causal) is far
// outside it. `auto` picks sdpa where this LibTorch has it; `sdpa` on
// LibTorch 1.13 is a config error. Dropout inside SDPA comes from the same
// generator, so a fixed seed gives the same step twice.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/model/gpt.hpp"
#include "compat/torch_compat.hpp"

namespace {

using namespace anchor;

config::ModelConfig model_cfg(const std::string& attention, double dropout = 0.0) {
  config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  m.block_size = 64;
  m.dropout = dropout;
  m.attention = attention;
  return m;
}

TEST(Attention, AutoIsSdpaWhereThisLibTorchHasIt) {
  const auto o = model::GptOptions::from(model_cfg("auto"));
  EXPECT_EQ(o.attention, compat::kHasSdpa ? model::Attention::kSdpa : model::Attention::kManual);
  EXPECT_EQ(model::GptOptions::from(model_cfg("manual")).attention, model::Attention::kManual);
  if (compat::kHasSdpa) {
    EXPECT_EQ(model::GptOptions::from(model_cfg("sdpa")).attention, model::Attention::kSdpa);
  } else {
    try {
      model::GptOptions::from(model_cfg("sdpa"));
      FAIL() << "sdpa accepted on LibTorch " << compat::torch_version();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("needs LibTorch 2.0"), std::string::npos) << e.what();
    }
  }
}

// The kernel exists from LibTorch 2.0 on: the tests below are built there
// (the torch2 line); on 1.13 the test above shows sdpa refused instead.
#if TORCH_VERSION_MAJOR >= 2

// The stated tolerance on the CPU, fp32: SDPA's fused kernel sums in another
// order than matmul + softmax + matmul. Measured on LibTorch 2.15, 2 layers,
// width 64, T 64: the loss equal, gradients within 4.7e-7 of their largest
// magnitude (the test prints both).
constexpr double kLossRelTol = 1e-5;
constexpr double kGradRelTol = 1e-4;

struct Pass {
  double loss = 0;
  torch::OrderedDict<std::string, torch::Tensor> grads;
};

Pass forward_backward(const model::GptOptions& o, std::uint64_t dropout_seed = 13) {
  torch::manual_seed(11);
  model::Gpt m(o);
  m->train();
  torch::manual_seed(5);
  auto x = torch::randint(0, 256, {4, 64}, torch::kInt64);
  auto y = torch::randint(0, 256, {4, 64}, torch::kInt64);
  torch::manual_seed(dropout_seed);
  auto loss = m->loss(x, y);
  loss.backward();
  Pass p;
  p.loss = loss.item<double>();
  for (const auto& kv : m->named_parameters()) p.grads.insert(kv.key(), kv.value().grad().clone());
  return p;
}

// Largest |a - b| / max|b| over every parameter's gradient.
double grad_rel_diff(const Pass& a, const Pass& b) {
  double worst = 0;
  for (const auto& kv : b.grads) {
    const auto& ga = a.grads[kv.key()];
    const double scale = std::max(kv.value().abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (ga - kv.value()).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(Attention, SdpaAgreesWithTheWrittenOutAttentionOnCpu) {
  const auto manual = forward_backward(model::GptOptions::from(model_cfg("manual")));
  const auto sdpa = forward_backward(model::GptOptions::from(model_cfg("sdpa")));
  const double loss_rel = std::abs(sdpa.loss - manual.loss) / std::abs(manual.loss);
  const double grad_rel = grad_rel_diff(sdpa, manual);
  std::printf("sdpa vs manual on CPU: loss rel %.3g (tolerance %.0g), gradients rel %.3g (tolerance %.0g)\n", loss_rel,
              kLossRelTol, grad_rel, kGradRelTol);
  EXPECT_LE(loss_rel, kLossRelTol);
  EXPECT_LE(grad_rel, kGradRelTol);
  // A twin of the manual pass is bitwise equal: the comparison sees only the kernel.
  EXPECT_EQ(forward_backward(model::GptOptions::from(model_cfg("manual"))).loss, manual.loss);
}

// Negative control: attention that may look ahead (no causal mask), computed
// by the same kernel, is far outside the tolerance, so the agreement above is
// not a comparison that cannot fail.
TEST(Attention, NonCausalAttentionIsFarOutsideTheTolerance) {
  torch::manual_seed(3);
  auto q = torch::randn({2, 4, 32, 16}), k = torch::randn({2, 4, 32, 16}), v = torch::randn({2, 4, 32, 16});
  const auto causal = compat::sdpa(q, k, v, 0.0, /*causal=*/true);
  const auto open = compat::sdpa(q, k, v, 0.0, /*causal=*/false);
  // The written-out causal attention, as gpt.cpp computes it.
  auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(16.0);
  att = att.masked_fill(torch::ones({32, 32}, torch::kBool).triu(1), -std::numeric_limits<float>::infinity());
  const auto manual = torch::matmul(torch::softmax(att, -1), v);
  const double scale = manual.abs().max().item<double>();
  EXPECT_LE((causal - manual).abs().max().item<double>() / scale, kGradRelTol);
  EXPECT_GT((open - manual).abs().max().item<double>() / scale, 100 * kGradRelTol);
}

// With dropout on, SDPA draws its masks from the default generator: the same
// seed gives the same loss and gradients bitwise (what resume relies on), and
// another seed does not (the masks are really drawn from it).
TEST(Attention, SdpaDropoutIsDrawnFromTheSeededGenerator) {
  const auto o = model::GptOptions::from(model_cfg("sdpa", 0.1));
  const auto a = forward_backward(o), b = forward_backward(o);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(grad_rel_diff(a, b), 0.0);
  EXPECT_NE(forward_backward(o, /*dropout_seed=*/14).loss, a.loss);
}
#endif  // TORCH_VERSION_MAJOR >= 2

}  // namespace
