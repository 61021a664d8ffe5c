// Two reports compared figure by figure: `anchor reproduce`'s verdict on its
// re-run (the supervisor's reproduce_compare stage).
#include "anchor/run_report/compare_reports.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "anchor/common/utf8.hpp"

namespace anchor::run_report {

namespace {

// The checks of one comparison and the rule figures compare by (compare_reports).
class Comparison {
 public:
  Comparison(bool bitwise, double tolerance) : bitwise_(bitwise), tolerance_(tolerance) {}

  void add(const std::string& name, bool ok, const std::string& detail) {
    checks_.push_back({{"name", name}, {"ok", ok}, {"detail", detail}});
    if (!ok) ++differences_;
  }

  // A figure: equal, or within the tolerance outside bitwise mode; what is not a number must be equal.
  void figure(const std::string& name, const nlohmann::json& x, const nlohmann::json& y) {
    if (!x.is_number() || !y.is_number()) {
      add(name, x == y, x == y ? "equal" : "original " + x.dump() + ", re-run " + y.dump());
      return;
    }
    const bool ok = close(x.get<double>(), y.get<double>());
    add(name, ok, ok ? "equal (" + x.dump() + ")" : "original " + x.dump() + ", re-run " + y.dump());
  }

  // A digest: required equal in bitwise mode, reported otherwise.
  void exact(const std::string& name, const nlohmann::json& x, const nlohmann::json& y) {
    const bool ok = x == y;
    if (!ok && !bitwise_) {
      add(name, true, "differs (not required outside bitwise mode)");
      return;
    }
    add(name, ok, ok ? "equal" : "original " + x.dump() + ", re-run " + y.dump());
  }

  nlohmann::json result() const {
    return {{"verdict", differences_ == 0 ? "reproduced" : "differs"},
            {"mode", bitwise_ ? "bitwise" : "tolerance"},
            {"tolerance", bitwise_ ? 0.0 : tolerance_},
            {"differences", differences_},
            {"checks", checks_}};
  }

 private:
  bool close(double x, double y) const {
    if (bitwise_) return x == y;
    return std::fabs(x - y) <= tolerance_ * std::max({std::fabs(x), std::fabs(y), 1e-12});
  }

  bool bitwise_;
  double tolerance_;
  nlohmann::json checks_ = nlohmann::json::array();
  int differences_ = 0;
};

// Every recorded step of train, reference and resume: loss, gradient norm,
// learning rate, loss scale, batch digest.
void compare_steps(Comparison& c, const nlohmann::json& a, const nlohmann::json& b) {
  const auto steps_a = a.value("steps", nlohmann::json::object()), steps_b = b.value("steps", nlohmann::json::object());
  for (const char* phase : {"train", "reference", "resume"}) {
    const auto sa = steps_a.value(phase, nlohmann::json::array()), sb = steps_b.value(phase, nlohmann::json::array());
    if (sa.size() != sb.size()) {
      c.add(std::string(phase) + " steps", false,
            "original ran " + std::to_string(sa.size()) + ", re-run " + std::to_string(sb.size()));
      continue;
    }
    for (size_t i = 0; i < sa.size(); ++i) {
      const std::string at = std::string(phase) + " step " + sa[i].value("step", nlohmann::json()).dump();
      c.figure(at + ": loss", sa[i]["loss"], sb[i]["loss"]);
      c.figure(at + ": grad_norm", sa[i]["grad_norm"], sb[i]["grad_norm"]);
      c.figure(at + ": learning rate", sa[i]["lr"], sb[i]["lr"]);
      if (sa[i].contains("loss_scale") || sb[i].contains("loss_scale"))
        c.figure(at + ": loss scale", sa[i].value("loss_scale", nlohmann::json(1.0)),
                 sb[i].value("loss_scale", nlohmann::json(1.0)));
      c.add(at + ": batch", sa[i]["batch_digest"] == sb[i]["batch_digest"],
            sa[i]["batch_digest"] == sb[i]["batch_digest"] ? "same input tokens"
                                                           : "different input tokens (data changed)");
    }
  }
}

// The evals, and the precision validation (docs/precision.md): the
// low-precision side's loss and gradient norm.
void compare_evals(Comparison& c, const nlohmann::json& a, const nlohmann::json& b) {
  const auto ea = a.value("eval", nlohmann::json::object()), eb = b.value("eval", nlohmann::json::object());
  c.figure("eval before save", ea.value("before_save", nlohmann::json()), eb.value("before_save", nlohmann::json()));
  c.figure("eval after restore", ea.value("after_restore", nlohmann::json()),
           eb.value("after_restore", nlohmann::json()));
  if (!a.contains("precision") && !b.contains("precision")) return;
  const auto pa = a.value("precision", nlohmann::json::object()), pb = b.value("precision", nlohmann::json::object());
  c.add(
      "precision verdict", pa.value("verdict", "") == pb.value("verdict", ""),
      "original " + pa.value("verdict", std::string("none")) + ", re-run " + pb.value("verdict", std::string("none")));
  for (const char* v : {"loss", "grad_norm"})
    c.figure(std::string("precision: ") + v, pa.value(v, nlohmann::json::object()).value("value", nlohmann::json()),
             pb.value(v, nlohmann::json::object()).value("value", nlohmann::json()));
}

// The resume verdict and the state digests of each save.
void compare_resume(Comparison& c, const nlohmann::json& a, const nlohmann::json& b) {
  const auto ra = a.value("resume", nlohmann::json::object()), rb = b.value("resume", nlohmann::json::object());
  c.add("resume verdict", ra.value("verdict", "") == rb.value("verdict", ""),
        "original " + ra.value("verdict", std::string("?")) + ", re-run " + rb.value("verdict", std::string("?")));
  // Reports before the scheme was named digest tensors as v1 (docs/report.md, "State digests").
  const std::string v1 = "anchor.state-digest/v1";
  const auto scheme = [&](const nlohmann::json& r) {
    const auto it = r.find("state_digest_scheme");
    return it != r.end() && it->is_string() ? it->get<std::string>() : (it == r.end() ? v1 : it->dump());
  };
  const std::string sa = scheme(ra), sb = scheme(rb);
  if (sa != sb) {
    c.add("state digests", true,
          "not compared: the original digests the state as " + sa + ", the re-run as " + sb +
              " (digests of different schemes differ for the same state)");
    return;
  }
  const auto da = ra.value("state_digests", nlohmann::json::object()),
             db = rb.value("state_digests", nlohmann::json::object());
  for (auto it = da.begin(); it != da.end(); ++it)
    for (const char* g : {"model", "optimizer", "rng", "scaler"}) {
      // Reports from before the loss scaler have no "scaler" group: compared only when both have it.
      if (std::string(g) == "scaler" &&
          (!it.value().contains(g) || !db.value(it.key(), nlohmann::json::object()).contains(g)))
        continue;
      c.exact("state " + it.key() + ": " + g, it.value().value(g, nlohmann::json()),
              db.value(it.key(), nlohmann::json::object()).value(g, nlohmann::json()));
    }
}

}  // namespace

nlohmann::json compare_reports(const nlohmann::json& a, const nlohmann::json& b, bool bitwise, double tol) {
  Comparison c(bitwise, tol);
  compare_steps(c, a, b);
  compare_evals(c, a, b);
  compare_resume(c, a, b);
  return c.result();
}

}  // namespace anchor::run_report
