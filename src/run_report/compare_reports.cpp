// Two reports compared figure by figure: `anchor reproduce`'s verdict on its
// re-run (the supervisor's reproduce_compare stage).
#include "anchor/run_report/compare_reports.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "anchor/common/utf8.hpp"

namespace anchor::run_report {

namespace {

// A field as JSON writes it ("null" when the report lacks it), for a check's detail.
template <class T>
std::string dumped(const Opt<T>& v) {
  return v ? Json(*v).dump() : "null";
}

// The checks of one comparison and the rule figures compare by (compare_reports).
class Comparison {
 public:
  Comparison(bool bitwise, double tolerance) : bitwise_(bitwise), tolerance_(tolerance) {}

  void add(const std::string& name, bool ok, const std::string& detail) {
    Check c;
    c.name = name, c.ok = ok, c.detail = detail;
    checks_.push_back(std::move(c));
    if (!ok) ++differences_;
  }

  // A figure: equal, or within the tolerance outside bitwise mode; one the report lacks must be lacking in both.
  void figure(const std::string& name, const Opt<double>& x, const Opt<double>& y) {
    if (!x || !y) {
      add(name, x == y, x == y ? "equal" : "original " + dumped(x) + ", re-run " + dumped(y));
      return;
    }
    const bool ok = close(*x, *y);
    add(name, ok, ok ? "equal (" + dumped(x) + ")" : "original " + dumped(x) + ", re-run " + dumped(y));
  }

  // A digest: required equal in bitwise mode, reported otherwise.
  void exact(const std::string& name, const Opt<std::string>& x, const Opt<std::string>& y) {
    const bool ok = x == y;
    if (!ok && !bitwise_) {
      add(name, true, "differs (not required outside bitwise mode)");
      return;
    }
    add(name, ok, ok ? "equal" : "original " + dumped(x) + ", re-run " + dumped(y));
  }

  Reproduction result() const {
    Reproduction r;
    r.verdict = differences_ == 0 ? "reproduced" : "differs";
    r.mode = bitwise_ ? "bitwise" : "tolerance";
    r.tolerance = bitwise_ ? 0.0 : tolerance_;
    r.differences = differences_;
    r.checks = checks_;
    return r;
  }

 private:
  bool close(double x, double y) const {
    if (bitwise_) return x == y;
    return std::fabs(x - y) <= tolerance_ * std::max({std::fabs(x), std::fabs(y), 1e-12});
  }

  bool bitwise_;
  double tolerance_;
  std::vector<Check> checks_;
  std::int64_t differences_ = 0;
};

// Every recorded step of train, reference and resume (a program pilot's:
// train, worker A's, and resumed, worker B's): loss, gradient norm, learning
// rate, loss scale, batch digest.
void compare_steps(Comparison& c, const RunReport& a, const RunReport& b) {
  const Steps &steps_a = or_empty(a.steps), &steps_b = or_empty(b.steps);
  for (const auto& [phase, part] : {std::pair<const char*, Opt<std::vector<StepRow>> Steps::*>{"train", &Steps::train},
                                    {"reference", &Steps::reference},
                                    {"resume", &Steps::resume},
                                    {"resumed", &Steps::resumed}}) {
    const auto &sa = or_empty(steps_a.*part), &sb = or_empty(steps_b.*part);
    if (sa.size() != sb.size()) {
      c.add(std::string(phase) + " steps", false,
            "original ran " + std::to_string(sa.size()) + ", re-run " + std::to_string(sb.size()));
      continue;
    }
    for (size_t i = 0; i < sa.size(); ++i) {
      // Counted from 1 whichever anchor wrote the original (steps.numbered_from).
      const std::string at =
          std::string(phase) + " step " + (sa[i].step ? std::to_string(*sa[i].step + step_number_offset(a)) : "null");
      c.figure(at + ": loss", sa[i].loss, sb[i].loss);
      c.figure(at + ": grad_norm", sa[i].grad_norm, sb[i].grad_norm);
      c.figure(at + ": learning rate", sa[i].lr, sb[i].lr);
      if (sa[i].loss_scale || sb[i].loss_scale)
        c.figure(at + ": loss scale", sa[i].loss_scale.value_or(1.0), sb[i].loss_scale.value_or(1.0));
      const bool same = sa[i].batch_digest == sb[i].batch_digest;
      c.add(at + ": batch", same, same ? "same input tokens" : "different input tokens (data changed)");
    }
  }
}

// The evals, and the precision validation (docs/precision.md): the
// low-precision side's loss and gradient norm.
void compare_evals(Comparison& c, const RunReport& a, const RunReport& b) {
  const Eval &ea = or_empty(a.eval), &eb = or_empty(b.eval);
  c.figure("eval before save", ea.before_save, eb.before_save);
  c.figure("eval after restore", ea.after_restore, eb.after_restore);
  if (!a.precision && !b.precision) return;
  const Precision &pa = or_empty(a.precision), &pb = or_empty(b.precision);
  c.add("precision verdict", pa.verdict.value_or("") == pb.verdict.value_or(""),
        "original " + pa.verdict.value_or("none") + ", re-run " + pb.verdict.value_or("none"));
  c.figure("precision: loss", or_empty(pa.loss).value, or_empty(pb.loss).value);
  c.figure("precision: grad_norm", or_empty(pa.grad_norm).value, or_empty(pb.grad_norm).value);
}

// The resume verdict and the state digests of each save.
void compare_resume(Comparison& c, const RunReport& a, const RunReport& b) {
  const Resume &ra = or_empty(a.resume), &rb = or_empty(b.resume);
  c.add("resume verdict", ra.verdict.value_or("") == rb.verdict.value_or(""),
        "original " + ra.verdict.value_or("?") + ", re-run " + rb.verdict.value_or("?"));
  // Reports before the scheme was named digest tensors as v1 (docs/report.md, "State digests").
  const std::string v1 = "anchor.state-digest/v1";
  const std::string sa = ra.state_digest_scheme.value_or(v1), sb = rb.state_digest_scheme.value_or(v1);
  if (sa != sb) {
    c.add("state digests", true,
          "not compared: the original digests the state as " + sa + ", the re-run as " + sb +
              " (digests of different schemes differ for the same state)");
    return;
  }
  const auto &da = or_empty(ra.state_digests), &db = or_empty(rb.state_digests);
  for (const auto& [which, groups] : da) {
    const auto other = db.find(which);
    const StateDigestGroups& theirs = other != db.end() ? other->second : or_empty(Opt<StateDigestGroups>());
    for (const auto& [g, digest] :
         {std::pair<const char*, Opt<std::string> StateDigestGroups::*>{"model", &StateDigestGroups::model},
          {"optimizer", &StateDigestGroups::optimizer},
          {"rng", &StateDigestGroups::rng},
          {"scaler", &StateDigestGroups::scaler}}) {
      // Reports from before the loss scaler have no "scaler" group: compared only when both have it.
      if (digest == &StateDigestGroups::scaler && (!groups.scaler || !theirs.scaler)) continue;
      c.exact("state " + which + ": " + g, groups.*digest, theirs.*digest);
    }
  }
}

}  // namespace

Reproduction compare_reports(const RunReport& a, const RunReport& b, bool bitwise, double tol) {
  Comparison c(bitwise, tol);
  compare_steps(c, a, b);
  compare_evals(c, a, b);
  compare_resume(c, a, b);
  return c.result();
}

}  // namespace anchor::run_report
