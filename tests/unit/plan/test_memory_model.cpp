// The memory model: fit, prediction, sharding and precision arithmetic, on
// hand-worked numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "anchor/error.hpp"
#include "anchor/plan/memory_model.hpp"

namespace {

using namespace anchor::plan;

// fixed 1e6 B, a = 1000 B/token, b = 2 B/token/position.
double truth(double mb, double t) { return 1e6 + 1000.0 * mb * t + 2.0 * mb * t * t; }

std::vector<MemoryPoint> three_points() {
  return {{4, 64, truth(4, 64)}, {2, 64, truth(2, 64)}, {4, 32, truth(4, 32)}};
}

TEST(MemoryFit, RecoversKnownCoefficientsExactlyFromThreePoints) {
  MemoryFit f = fit_memory(three_points());
  EXPECT_TRUE(f.quadratic);
  EXPECT_TRUE(f.note.empty());
  EXPECT_NEAR(f.fixed, 1e6, 1e-3);
  EXPECT_NEAR(f.per_token, 1000.0, 1e-6);
  EXPECT_NEAR(f.per_token_seq, 2.0, 1e-9);
  for (double r : f.residual) EXPECT_NEAR(r, 0.0, 1e-3);
  EXPECT_LT(f.max_relative_residual, 1e-12);
}

TEST(MemoryFit, OnePointIsExactThereAndScalesTheRestAsActivations) {
  // A program that cannot be probed: fixed is what the caller knows (state + held before the step).
  const MemoryPoint p{4, 64, truth(4, 64)};
  MemoryFit f = fit_memory_one_point(p, 1e6);
  EXPECT_FALSE(f.quadratic);
  EXPECT_NE(f.note.find("one measured point (micro_batch 4, seq_len 64)"), std::string::npos) << f.note;
  EXPECT_DOUBLE_EQ(f.fixed, 1e6);
  // a = (peak - fixed) / (mb*T) = 1000 + 2*64: the seq^2 term folded in at T = 64.
  EXPECT_NEAR(f.per_token, 1128.0, 1e-9);
  EXPECT_NEAR(f.predict(4, 64), truth(4, 64), 1e-6);
  EXPECT_NEAR(f.predict(8, 64), truth(8, 64), 1e-6);  // same T: exact
  // Negative control: at another T it misses the seq^2 term, as the note says.
  EXPECT_GT(std::fabs(f.predict(4, 128) - truth(4, 128)), 1e4);
  // A fixed part larger than the peak is capped: activations never negative.
  EXPECT_GE(fit_memory_one_point(p, 1e12).per_token, 0.0);
  EXPECT_THROW(fit_memory_one_point({0, 64, 1e6}, 0), anchor::Error);
}

TEST(MemoryFit, PredictsAHeldOutPoint) {
  MemoryFit f = fit_memory(three_points());
  // Hand-worked: 1e6 + 1000*8*128 + 2*8*128*128 = 1e6 + 1024000 + 262144.
  EXPECT_NEAR(f.predict(8, 128), 2286144.0, 1e-2);
  EXPECT_NEAR(f.predict(1, 256), truth(1, 256), 1e-2);
}

TEST(MemoryFit, NegativeControlLinearModelMissesTheQuadraticTerm) {
  // The same data with only two points (one seq_len) cannot see b: the
  // held-out point at another T is then off by the attention term.
  MemoryFit lin = fit_memory({{4, 64, truth(4, 64)}, {2, 64, truth(2, 64)}});
  EXPECT_FALSE(lin.quadratic);
  EXPECT_NE(lin.note.find("2 points"), std::string::npos);
  // Exact at its own points.
  EXPECT_NEAR(lin.residual[0], 0.0, 1e-3);
  EXPECT_NEAR(lin.residual[1], 0.0, 1e-3);
  // At T = 128 the linear model uses a' = 1000 + 2*64 per token: off by 2*mb*T*(128-64).
  EXPECT_NEAR(truth(8, 128) - lin.predict(8, 128), 2.0 * 8 * 128 * 64, 1e-2);
  EXPECT_GT(std::fabs(lin.predict(8, 128) - truth(8, 128)), 1e5);
}

TEST(MemoryFit, OneSequenceLengthFallsBackToLinearAndSaysWhy) {
  MemoryFit f = fit_memory({{4, 64, truth(4, 64)}, {2, 64, truth(2, 64)}, {1, 64, truth(1, 64)}});
  EXPECT_FALSE(f.quadratic);
  EXPECT_NE(f.note.find("seq_len 64"), std::string::npos) << f.note;
  EXPECT_EQ(f.per_token_seq, 0.0);
  EXPECT_NEAR(f.per_token, 1000.0 + 2.0 * 64, 1e-6);
}

TEST(MemoryFit, LeastSquaresOverFourNoisyPoints) {
  auto pts = three_points();
  pts.push_back({8, 64, truth(8, 64) + 4000.0});  // a noisy fourth point
  MemoryFit f = fit_memory(pts);
  EXPECT_TRUE(f.quadratic);
  // With an intercept column the least-squares residuals sum to zero.
  double sum = 0;
  for (double r : f.residual) sum += r;
  EXPECT_NEAR(sum, 0.0, 1e-3);
  EXPECT_GT(f.max_relative_residual, 0.0);
}

TEST(MemoryFit, RejectsTooFewOrDegeneratePoints) {
  EXPECT_THROW(fit_memory({}), anchor::Error);
  EXPECT_THROW(fit_memory({{4, 64, 1e6}}), anchor::Error);
  // Same token count mb*T everywhere: nothing separates fixed from activations.
  EXPECT_THROW(fit_memory({{4, 64, 1e6}, {4, 64, 1.1e6}}), anchor::Error);
  EXPECT_THROW(fit_memory({{0, 64, 1e6}, {4, 64, 2e6}}), anchor::Error);
  EXPECT_THROW(fit_memory({{2, 64, -1.0}, {4, 64, 2e6}}), anchor::Error);
  try {
    fit_memory({{4, 64, 1e6}});
    FAIL();
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("at least 2"), std::string::npos);
  }
}

// The probe's shapes: a quarter of the micro-batch at the configured sequence
// and half the sequence (when that is 8 or more) at the configured micro-batch;
// none equal to the configured shape, and the quadratic fit is determined.
TEST(ProbeShapes, QuarterShapesEachSmallerThanTheConfiguredOne) {
  using Shapes = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(probe_shapes(4, 256), (Shapes{{1, 256}, {4, 128}}));
  EXPECT_EQ(probe_shapes(16, 1024), (Shapes{{4, 1024}, {16, 512}}));
  EXPECT_EQ(probe_shapes(2, 16), (Shapes{{1, 16}, {2, 8}})) << "8 tokens is the shortest sequence probed";
  EXPECT_EQ(probe_shapes(2, 15), (Shapes{{1, 15}})) << "7 would be under it, 8 too close to 15";
  EXPECT_EQ(probe_shapes(8, 64, 6), (Shapes{{6, 64}, {8, 32}})) << "pilot.memory_probe_micro_batch when below";
  EXPECT_EQ(probe_shapes(8, 64, 8), (Shapes{{2, 64}, {8, 32}})) << "not below the micro-batch: a quarter";
  EXPECT_EQ(probe_shapes(1, 64), (Shapes{{1, 32}})) << "micro-batch 1 has no smaller one";
  EXPECT_EQ(probe_shapes(4, 8), (Shapes{{1, 8}}));
  EXPECT_TRUE(probe_shapes(1, 8).empty());
  EXPECT_TRUE(probe_shapes(1, 15).empty());
  // With the configured point, the probe's two determine the full model.
  std::vector<MemoryPoint> pts{{4, 256, 1e9}};
  for (auto [mb, T] : probe_shapes(4, 256)) pts.push_back({mb, T, 1e8 + 10.0 * mb * T + 0.5 * mb * T * T});
  EXPECT_TRUE(fit_memory(pts).quadratic);
}

// A model built from exact coefficients (no fitting): fixed 450 B over a
// state of 100 (params) + 100 (grads) + 200 (optimizer) -> other fixed 50;
// activations 10 B/token; n_layer 2.
MemoryModel exact_model(Precision measured = Precision::kFp32) {
  MemoryFit f;
  f.fixed = 450;
  f.per_token = 10;
  f.per_token_seq = 0;
  return MemoryModel(f, StateBytes{100, 100, 200}, measured, 2);
}

TEST(MemoryModel, SeparatesStateFromOtherFixed) {
  MemoryModel m = exact_model();
  EXPECT_DOUBLE_EQ(m.other_fixed(), 50.0);
  MemoryBreakdown b = m.predict({2, 5, Precision::kFp32, 0, 1});
  EXPECT_DOUBLE_EQ(b.activations, 100.0);
  EXPECT_DOUBLE_EQ(b.total, 550.0);
  EXPECT_DOUBLE_EQ(b.total, m.fit().predict(2, 5));  // stage 0 == the fitted curve
}

TEST(MemoryModel, ShardingDividesOptimizerThenGradientsThenParameters) {
  MemoryModel m = exact_model();
  const MemoryTarget base{1, 10, Precision::kFp32, 0, 4};  // activations 100
  // Stage 0 ignores the degree: DDP replicates everything.
  EXPECT_DOUBLE_EQ(m.predict(base).total, 550.0);
  MemoryTarget t = base;
  t.zero_stage = 1;  // 100 + 100 + 200/4 + 50 + 100
  EXPECT_DOUBLE_EQ(m.predict(t).total, 400.0);
  t.zero_stage = 2;  // 100 + 25 + 50 + 50 + 100
  EXPECT_DOUBLE_EQ(m.predict(t).total, 325.0);
  t.zero_stage = 3;  // 25 + 25 + 50 + 50 + 100 + gather 100/2
  EXPECT_DOUBLE_EQ(m.predict(t).gather_buffer, 50.0);
  EXPECT_DOUBLE_EQ(m.predict(t).total, 300.0);
  t.zero_stage = 4;
  EXPECT_THROW(m.predict(t), anchor::Error);
}

TEST(MemoryModel, LowPrecisionHalvesActivationsAndAddsTheCastCopy) {
  MemoryModel m = exact_model();
  MemoryBreakdown fp32 = m.predict({2, 5, Precision::kFp32, 0, 1});
  MemoryBreakdown bf16 = m.predict({2, 5, Precision::kBf16, 0, 1});
  EXPECT_DOUBLE_EQ(bf16.activations, fp32.activations / 2);
  EXPECT_DOUBLE_EQ(bf16.cast_weights, 50.0);  // parameters / 2
  // Master weights, gradients and optimizer state unchanged.
  EXPECT_DOUBLE_EQ(bf16.parameters, fp32.parameters);
  EXPECT_DOUBLE_EQ(bf16.gradients, fp32.gradients);
  EXPECT_DOUBLE_EQ(bf16.optimizer, fp32.optimizer);
  // Measured in bf16, predicting fp32: activations double, the cast copy leaves.
  MemoryModel mb = exact_model(Precision::kBf16);
  EXPECT_DOUBLE_EQ(mb.other_fixed(), 0.0);  // 450 - 400 - 50
  MemoryBreakdown up = mb.predict({2, 5, Precision::kFp32, 0, 1});
  EXPECT_DOUBLE_EQ(up.activations, 200.0);
  EXPECT_DOUBLE_EQ(up.cast_weights, 0.0);
  EXPECT_THROW(parse_precision("fp8"), anchor::Error);
}

TEST(MemoryModel, MaxMicroBatchAtTheBoundary) {
  MemoryModel m = exact_model();
  // Per sequence at T=10: 100 B; fixed 450 B.
  const MemoryTarget t{0, 10, Precision::kFp32, 0, 1};
  EXPECT_EQ(m.max_micro_batch(t, 450 + 7 * 100).value(), 7);      // exactly fits
  EXPECT_EQ(m.max_micro_batch(t, 450 + 7 * 100 - 1).value(), 6);  // one byte short
  EXPECT_EQ(m.max_micro_batch(t, 549).value(), 0);                // not even one
  // Sharding frees state for more sequences: ZeRO-1 over 4 saves 150 B.
  MemoryTarget z = t;
  z.zero_stage = 1;
  z.degree = 4;
  EXPECT_EQ(m.max_micro_batch(z, 450 + 7 * 100).value(), 8);
}

}  // namespace
