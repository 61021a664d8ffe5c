#pragma once
// The memory model: peak step memory fitted from measured points and
// predicted for other micro-batches, sequence lengths, precisions and
// sharding degrees. Pure arithmetic on measured numbers (docs/plan.md).
//
//   peak(mb, T) = fixed + a * (mb * T) + b * (mb * T * T)
//
// `fixed` is what does not grow with the batch (weights, gradients, optimizer
// state, workspaces); `a` is activation bytes per token; `b` is the part that
// grows with the square of the sequence length (attention scores).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace anchor::plan {

// One measured step: micro-batch, sequence length and its peak allocated bytes
// (a full step: zero_grad, forward, backward, optimizer step with full state).
struct MemoryPoint {
  std::int64_t micro_batch = 0;
  std::int64_t seq_len = 0;
  double peak_bytes = 0;
};

// Bytes of the training state, as measured (tensor sizes, not estimates).
struct StateBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32" | "bf16" | "fp16"; throws Error (kUsage) naming the value otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
// Bytes of one activation element under that precision (4 or 2).
double activation_element_bytes(Precision p);

struct MemoryFit {
  double fixed = 0;                  // bytes
  double per_token = 0;              // a: bytes per (mb * T)
  double per_token_seq = 0;          // b: bytes per (mb * T * T); 0 in the linear model
  bool quadratic = true;             // false: the linear model (fixed + a * mb * T) was fitted
  std::string note;                  // why the linear model was used; "" for the full fit
  std::vector<double> predicted;     // per input point, in input order
  std::vector<double> residual;      // predicted - measured, bytes
  double max_relative_residual = 0;  // max |residual| / measured

  double predict(std::int64_t micro_batch, std::int64_t seq_len) const;
};

// Least squares over the points. Three or more points whose (mb*T, mb*T*T)
// columns are independent (at least two sequence lengths): the full model,
// exact for three points. Two points, or every point at one sequence length:
// the linear model, and `note` says why. Throws Error (kUsage) with fewer than
// two points, a point with micro_batch or seq_len < 1 or a negative peak, or
// points that do not determine even the linear model (one distinct mb*T).
MemoryFit fit_memory(const std::vector<MemoryPoint>& points);

// One measured point (a program that cannot be probed at other shapes): fixed
// is `fixed_bytes` (what the caller knows does not grow with the batch: the
// state and what was held before the first step), everything above it is
// activations linear in mb*T (no seq_len^2 term), and `note` says so. Exact at
// the measured point; elsewhere it errs by whatever part of the peak neither
// is (workspaces, allocator slack), which it scales with the batch. Throws
// Error (kUsage) on a point fit_memory would refuse.
MemoryFit fit_memory_one_point(const MemoryPoint& point, double fixed_bytes);

// The shapes the memory probe measures besides the configured (micro_batch,
// seq_len): a quarter of the micro-batch (at least 1; `probe_micro_batch`
// instead when it is between 1 and micro_batch - 1) at the configured
// sequence, and the configured micro-batch at half the sequence when that is
// 8 tokens or more (a shorter one is too close to the configured length to
// separate the sequence's terms). Micro-batch 1 with a sequence under 16 has
// none. A quarter of the micro-batch costs a
// quarter of a step and predicts as well as half did; a quarter of the
// sequence did not: at 25M parameters its step peaked at the optimizer step's
// floor, not at its activations, and held-out errors grew from 0.3% to 5.7%
// (docs/plan.md, "Accuracy, measured"). The built-in probe and a program's
// probe both take their shapes from here.
std::vector<std::pair<std::int64_t, std::int64_t>> probe_shapes(std::int64_t micro_batch, std::int64_t seq_len,
                                                                std::int64_t probe_micro_batch = 0);

// What a target configuration is predicted to hold at peak, by part.
struct MemoryBreakdown {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double other_fixed = 0;    // fixed - measured state: workspaces, allocator slack, buffers
  double cast_weights = 0;   // low-precision autocast copy of the weights
  double gather_buffer = 0;  // ZeRO-3: one layer's gathered parameters
  double activations = 0;
  double total = 0;
};

struct MemoryTarget {
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 1;
  Precision precision = Precision::kFp32;
  int zero_stage = 0;  // 0: replicated (DDP); 1: optimizer; 2: + gradients; 3: + parameters
  int degree = 1;      // ranks the sharded state is divided over
};

// The fitted model plus the measured state it is separated against.
class MemoryModel {
 public:
  // `measured` is the precision the points were measured at; `n_layer` sizes
  // the ZeRO-3 gather buffer (parameters / n_layer).
  MemoryModel(MemoryFit fit, StateBytes state, Precision measured, int n_layer);

  const MemoryFit& fit() const { return fit_; }
  const StateBytes& state() const { return state_; }
  // fixed - state - the measured run's own cast copy: what the fixed part
  // holds beyond weights, gradients and optimizer state. May be negative when
  // the allocator returned memory before the peak.
  double other_fixed() const;

  // Throws Error (kUsage) when zero_stage is not 0..3 or degree < 1.
  MemoryBreakdown predict(const MemoryTarget& t) const;

  // The largest micro-batch whose predicted total is <= capacity_bytes (the
  // target's micro_batch is ignored); 0 when not even one fits; nullopt when
  // the per-sequence activation bytes are not positive (no bound can be given).
  std::optional<std::int64_t> max_micro_batch(MemoryTarget t, double capacity_bytes) const;

 private:
  MemoryFit fit_;
  StateBytes state_;
  Precision measured_;
  int n_layer_;
};

}  // namespace anchor::plan
