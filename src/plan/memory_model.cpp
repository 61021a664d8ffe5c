#include "anchor/plan/memory_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "anchor/error.hpp"

namespace anchor::plan {
namespace {

using Real = long double;

// Least squares for y ~ X c with n <= 3 columns, by Householder QR on
// columns scaled to unit maximum: the features span ~10 orders of magnitude
// (1, mb*T, mb*T*T), and QR (unlike the normal equations) does not square the
// condition number, so three points give the exact solution. Returns false
// when a column is (numerically) dependent on the ones before it.
bool least_squares(std::vector<std::array<Real, 3>> x, std::vector<Real> y, int n, std::array<Real, 3>& coef) {
  const std::size_t m = x.size();
  std::array<Real, 3> scale{1, 1, 1};
  for (int j = 0; j < n; ++j) {
    Real mx = 0;
    for (const auto& r : x) mx = std::max(mx, std::fabs(r[j]));
    if (mx == 0) return false;
    scale[j] = mx;
    for (auto& r : x) r[j] /= mx;
  }
  for (int k = 0; k < n; ++k) {
    Real norm = 0;
    for (std::size_t i = k; i < m; ++i) norm += x[i][k] * x[i][k];
    norm = std::sqrt(norm);
    // Relative to a unit column: below this the column is a combination of
    // the previous ones (e.g. mb*T*T when every point has one T).
    if (norm < 1e-9L) return false;
    const Real alpha = x[k][k] > 0 ? -norm : norm;
    std::vector<Real> v(m, 0);
    for (std::size_t i = k; i < m; ++i) v[i] = x[i][k];
    v[k] -= alpha;
    Real vv = 0;
    for (std::size_t i = k; i < m; ++i) vv += v[i] * v[i];
    if (vv == 0) continue;
    for (int j = k; j < n; ++j) {
      Real d = 0;
      for (std::size_t i = k; i < m; ++i) d += v[i] * x[i][j];
      for (std::size_t i = k; i < m; ++i) x[i][j] -= 2 * d / vv * v[i];
    }
    Real d = 0;
    for (std::size_t i = k; i < m; ++i) d += v[i] * y[i];
    for (std::size_t i = k; i < m; ++i) y[i] -= 2 * d / vv * v[i];
    if (std::fabs(x[k][k]) < 1e-9L) return false;
  }
  for (int k = n - 1; k >= 0; --k) {
    Real s = y[k];
    for (int j = k + 1; j < n; ++j) s -= x[k][j] * coef[j];
    coef[k] = s / x[k][k];
  }
  for (int j = 0; j < n; ++j) coef[j] /= scale[j];
  return true;
}

std::string point_text(const MemoryPoint& p) {
  return "(micro_batch " + std::to_string(p.micro_batch) + ", seq_len " + std::to_string(p.seq_len) + ")";
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw Error(ErrorKind::kUsage, "precision '" + name + "': not one of fp32, bf16, fp16",
              "train.precision and measurements.memory.precision take fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "fp32";
}

double activation_element_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

double MemoryFit::predict(std::int64_t mb, std::int64_t t) const {
  const double tokens = static_cast<double>(mb) * static_cast<double>(t);
  return fixed + per_token * tokens + per_token_seq * tokens * static_cast<double>(t);
}

MemoryFit fit_memory(const std::vector<MemoryPoint>& points) {
  const char* hint =
      "the pilot measures the step at the configured micro-batch and smaller probes "
      "(pilot.memory_probe_micro_batch); see docs/plan.md";
  if (points.size() < 2)
    throw Error(ErrorKind::kUsage,
                "memory model: " + std::to_string(points.size()) +
                    " measured point(s); at least 2 are needed to separate the fixed part from "
                    "activations",
                hint);
  std::set<std::int64_t> seq_lens, token_counts;
  for (const auto& p : points) {
    if (p.micro_batch < 1 || p.seq_len < 1 || !(p.peak_bytes >= 0) || !std::isfinite(p.peak_bytes))
      throw Error(ErrorKind::kUsage,
                  "memory model: point " + point_text(p) + " has peak " + std::to_string(p.peak_bytes) +
                      "; micro_batch and seq_len must be >= 1 and the peak a finite byte count >= 0",
                  hint);
    seq_lens.insert(p.seq_len);
    token_counts.insert(p.micro_batch * p.seq_len);
  }

  std::vector<std::array<Real, 3>> x;
  std::vector<Real> y;
  for (const auto& p : points) {
    const Real tokens = static_cast<Real>(p.micro_batch) * static_cast<Real>(p.seq_len);
    x.push_back({1.0L, tokens, tokens * static_cast<Real>(p.seq_len)});
    y.push_back(static_cast<Real>(p.peak_bytes));
  }

  MemoryFit fit;
  std::array<Real, 3> c{0, 0, 0};
  bool full = false;
  if (points.size() >= 3 && seq_lens.size() >= 2) full = least_squares(x, y, 3, c);
  if (!full) {
    fit.quadratic = false;
    if (points.size() < 3)
      fit.note =
          "2 points: linear model fixed + a*mb*T (the seq_len^2 attention term is not "
          "separated; predictions at other sequence lengths are less certain)";
    else if (seq_lens.size() < 2)
      fit.note = "every point has seq_len " + std::to_string(*seq_lens.begin()) +
                 ": linear model fixed + a*mb*T (the seq_len^2 term needs points at two "
                 "sequence lengths)";
    else
      fit.note = "the points do not separate mb*T from mb*T*T: linear model fixed + a*mb*T";
    c = {0, 0, 0};
    if (token_counts.size() < 2 || !least_squares(x, y, 2, c))
      throw Error(ErrorKind::kUsage,
                  "memory model: every point has the same token count mb*T = " + std::to_string(*token_counts.begin()) +
                      "; the fixed part cannot be separated from activations",
                  hint);
  }
  fit.fixed = static_cast<double>(c[0]);
  fit.per_token = static_cast<double>(c[1]);
  fit.per_token_seq = static_cast<double>(c[2]);
  for (const auto& p : points) {
    const double pred = fit.predict(p.micro_batch, p.seq_len);
    fit.predicted.push_back(pred);
    fit.residual.push_back(pred - p.peak_bytes);
    if (p.peak_bytes > 0)
      fit.max_relative_residual = std::max(fit.max_relative_residual, std::fabs(pred - p.peak_bytes) / p.peak_bytes);
  }
  return fit;
}

std::vector<std::pair<std::int64_t, std::int64_t>> probe_shapes(std::int64_t micro_batch, std::int64_t seq_len,
                                                                std::int64_t probe_micro_batch) {
  const std::int64_t small_mb = probe_micro_batch > 0 && probe_micro_batch < micro_batch
                                    ? probe_micro_batch
                                    : std::max<std::int64_t>(1, micro_batch / 4);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  if (small_mb < micro_batch) shapes.push_back({small_mb, seq_len});
  if (seq_len / 2 >= 8) shapes.push_back({micro_batch, seq_len / 2});
  return shapes;
}

MemoryFit fit_memory_one_point(const MemoryPoint& p, double fixed_bytes) {
  if (p.micro_batch < 1 || p.seq_len < 1 || !(p.peak_bytes >= 0) || !std::isfinite(p.peak_bytes) ||
      !std::isfinite(fixed_bytes))
    throw Error(ErrorKind::kUsage, "memory model: point " + point_text(p) + " has peak " +
                                       std::to_string(p.peak_bytes) +
                                       "; micro_batch and seq_len must be >= 1 and the peak a finite byte count >= 0");
  MemoryFit fit;
  fit.quadratic = false;
  const double tokens = static_cast<double>(p.micro_batch) * static_cast<double>(p.seq_len);
  fit.fixed = std::min(fixed_bytes, p.peak_bytes);
  fit.per_token = (p.peak_bytes - fit.fixed) / tokens;
  fit.note = "one measured point (micro_batch " + std::to_string(p.micro_batch) + ", seq_len " +
             std::to_string(p.seq_len) +
             "): fixed = the state + what was held before the first step, the rest of the peak taken as "
             "activations linear in mb*T; exact at that point, elsewhere it scales workspaces with the "
             "batch and misses the seq_len^2 attention term (the built-in model's 3-point fit is within "
             "10% on held-out shapes; this one is not checked)";
  fit.predicted.push_back(fit.predict(p.micro_batch, p.seq_len));
  fit.residual.push_back(fit.predicted.back() - p.peak_bytes);
  return fit;
}

MemoryModel::MemoryModel(MemoryFit fit, StateBytes state, Precision measured, int n_layer)
    : fit_(std::move(fit)), state_(state), measured_(measured), n_layer_(std::max(1, n_layer)) {}

namespace {
// Autocast keeps a low-precision copy of each fp32 weight it casts (2 bytes
// per 4-byte parameter) for the duration of the forward/backward.
double cast_copy(const StateBytes& s, Precision p) { return p == Precision::kFp32 ? 0.0 : s.parameters / 2.0; }
}  // namespace

double MemoryModel::other_fixed() const { return fit_.fixed - state_.total() - cast_copy(state_, measured_); }

MemoryBreakdown MemoryModel::predict(const MemoryTarget& t) const {
  if (t.zero_stage < 0 || t.zero_stage > 3 || t.degree < 1)
    throw Error(ErrorKind::kUsage, "memory model: ZeRO stage " + std::to_string(t.zero_stage) + " over degree " +
                                       std::to_string(t.degree) + "; the stage is 0..3 and the degree >= 1");
  const double d = t.zero_stage == 0 ? 1.0 : static_cast<double>(t.degree);
  MemoryBreakdown b;
  b.optimizer = state_.optimizer / (t.zero_stage >= 1 ? d : 1.0);
  b.gradients = state_.gradients / (t.zero_stage >= 2 ? d : 1.0);
  b.parameters = state_.parameters / (t.zero_stage >= 3 ? d : 1.0);
  b.gather_buffer = t.zero_stage >= 3 && t.degree > 1 ? state_.parameters / n_layer_ : 0.0;
  b.other_fixed = other_fixed();
  b.cast_weights = cast_copy(state_, t.precision) / (t.zero_stage >= 3 ? d : 1.0);
  const double scale = activation_element_bytes(t.precision) / activation_element_bytes(measured_);
  const double tokens = static_cast<double>(t.micro_batch) * static_cast<double>(t.seq_len);
  b.activations = scale * (fit_.per_token * tokens + fit_.per_token_seq * tokens * static_cast<double>(t.seq_len));
  b.total = b.parameters + b.gradients + b.optimizer + b.other_fixed + b.cast_weights + b.gather_buffer + b.activations;
  return b;
}

std::optional<std::int64_t> MemoryModel::max_micro_batch(MemoryTarget t, double capacity) const {
  t.micro_batch = 0;
  const double fixed = predict(t).total;
  t.micro_batch = 1;
  const double per_sequence = predict(t).total - fixed;
  if (!(per_sequence > 0)) return std::nullopt;
  if (fixed + per_sequence > capacity) return 0;
  auto mb = static_cast<std::int64_t>(std::floor((capacity - fixed) / per_sequence));
  // Guard the floor against rounding at an exact boundary.
  t.micro_batch = mb + 1;
  if (predict(t).total <= capacity) ++mb;
  t.micro_batch = mb;
  while (mb > 0 && predict(t).total > capacity) t.micro_batch = --mb;
  return mb;
}

}  // namespace anchor::plan
