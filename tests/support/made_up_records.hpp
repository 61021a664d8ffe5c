#pragma once
// Made-up step records and state digests, consistent with one another, for
// what stands in for a worker's results (tests/support/fake_worker.cpp) and
// the tests of the result file (tests/unit/protocol/test_worker_result.cpp).
#include <cstdint>
#include <string>

#include "anchor/train/records.hpp"

namespace anchor::test {

inline const std::string kDigestA(64, 'a'), kDigestB(64, 'b'), kDigestC(64, 'c'), kDigestD(64, 'd');

// One step: its loss as given, the rest fixed (grad norm 1.5, lr 1e-3, 256 tokens).
inline train::StepRecord made_up_step(std::int64_t s, double loss) {
  train::StepRecord r;
  r.step = s;
  r.loss = loss;
  r.grad_norm = 1.5;
  r.lr = 1e-3;
  r.batch_digest = kDigestA;
  r.data_wait_s = 0.001;
  r.compute_s = 0.01;
  r.tokens = 256;
  return r;
}

// The state at step s: `model` and `optimizer` the two components a test varies.
inline train::StateDigest made_up_digest(std::int64_t s, const std::string& model = kDigestA,
                                         const std::string& optimizer = kDigestB) {
  train::StateDigest d;
  d.model = model;
  d.optimizer = optimizer;
  d.rng = kDigestC;
  d.scaler = kDigestD;
  d.step = s;
  d.tensors = {{"model/wte.weight", model}, {"optimizer/wte.weight.exp_avg", optimizer}};
  return d;
}

}  // namespace anchor::test
