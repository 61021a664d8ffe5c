#include "anchor/pipeline/reproduce.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace anchor::pipeline {

nlohmann::json compare_reports(const nlohmann::json& a, const nlohmann::json& b, bool bitwise, double tol) {
  nlohmann::json checks = nlohmann::json::array();
  int differences = 0;
  auto add = [&](const std::string& name, bool ok, const std::string& detail) {
    checks.push_back({{"name", name}, {"ok", ok}, {"detail", detail}});
    if (!ok) ++differences;
  };
  auto close = [&](double x, double y) {
    if (bitwise) return x == y;
    return std::fabs(x - y) <= tol * std::max({std::fabs(x), std::fabs(y), 1e-12});
  };
  auto figure = [&](const std::string& name, const nlohmann::json& x, const nlohmann::json& y) {
    if (!x.is_number() || !y.is_number()) {
      add(name, x == y, x == y ? "equal" : "original " + x.dump() + ", re-run " + y.dump());
      return;
    }
    const bool ok = close(x.get<double>(), y.get<double>());
    add(name, ok, ok ? "equal (" + x.dump() + ")" : "original " + x.dump() + ", re-run " + y.dump());
  };
  auto exact = [&](const std::string& name, const nlohmann::json& x, const nlohmann::json& y) {
    const bool ok = x == y;
    if (!ok && !bitwise) {
      add(name, true, "differs (not required outside bitwise mode)");
      return;
    }
    add(name, ok, ok ? "equal" : "original " + x.dump() + ", re-run " + y.dump());
  };

  const auto steps_a = a.value("steps", nlohmann::json::object()), steps_b = b.value("steps", nlohmann::json::object());
  for (const char* phase : {"train", "reference", "resume"}) {
    const auto sa = steps_a.value(phase, nlohmann::json::array()), sb = steps_b.value(phase, nlohmann::json::array());
    if (sa.size() != sb.size()) {
      add(std::string(phase) + " steps", false,
          "original ran " + std::to_string(sa.size()) + ", re-run " + std::to_string(sb.size()));
      continue;
    }
    for (size_t i = 0; i < sa.size(); ++i) {
      const std::string at = std::string(phase) + " step " + sa[i].value("step", nlohmann::json()).dump();
      figure(at + ": loss", sa[i]["loss"], sb[i]["loss"]);
      figure(at + ": grad_norm", sa[i]["grad_norm"], sb[i]["grad_norm"]);
      figure(at + ": learning rate", sa[i]["lr"], sb[i]["lr"]);
      if (sa[i].contains("loss_scale") || sb[i].contains("loss_scale"))
        figure(at + ": loss scale", sa[i].value("loss_scale", nlohmann::json(1.0)),
               sb[i].value("loss_scale", nlohmann::json(1.0)));
      add(at + ": batch", sa[i]["batch_digest"] == sb[i]["batch_digest"],
          sa[i]["batch_digest"] == sb[i]["batch_digest"] ? "same input tokens"
                                                         : "different input tokens (data changed)");
    }
  }
  const auto ea = a.value("eval", nlohmann::json::object()), eb = b.value("eval", nlohmann::json::object());
  figure("eval before save", ea.value("before_save", nlohmann::json()), eb.value("before_save", nlohmann::json()));
  figure("eval after restore", ea.value("after_restore", nlohmann::json()),
         eb.value("after_restore", nlohmann::json()));
  // The precision validation (docs/precision.md): the low-precision side's loss and gradient norm.
  if (a.contains("precision") || b.contains("precision")) {
    const auto pa = a.value("precision", nlohmann::json::object()), pb = b.value("precision", nlohmann::json::object());
    add("precision verdict", pa.value("verdict", "") == pb.value("verdict", ""),
        "original " + pa.value("verdict", std::string("none")) + ", re-run " +
            pb.value("verdict", std::string("none")));
    for (const char* v : {"loss", "grad_norm"})
      figure(std::string("precision: ") + v, pa.value(v, nlohmann::json::object()).value("value", nlohmann::json()),
             pb.value(v, nlohmann::json::object()).value("value", nlohmann::json()));
  }
  const auto ra = a.value("resume", nlohmann::json::object()), rb = b.value("resume", nlohmann::json::object());
  add("resume verdict", ra.value("verdict", "") == rb.value("verdict", ""),
      "original " + ra.value("verdict", std::string("?")) + ", re-run " + rb.value("verdict", std::string("?")));
  const auto da = ra.value("state_digests", nlohmann::json::object()),
             db = rb.value("state_digests", nlohmann::json::object());
  for (auto it = da.begin(); it != da.end(); ++it)
    for (const char* g : {"model", "optimizer", "rng", "scaler"}) {
      // Reports from before the loss scaler have no "scaler" group: compared only when both have it.
      if (std::string(g) == "scaler" &&
          (!it.value().contains(g) || !db.value(it.key(), nlohmann::json::object()).contains(g)))
        continue;
      exact("state " + it.key() + ": " + g, it.value().value(g, nlohmann::json()),
            db.value(it.key(), nlohmann::json::object()).value(g, nlohmann::json()));
    }
  return {{"verdict", differences == 0 ? "reproduced" : "differs"},
          {"mode", bitwise ? "bitwise" : "tolerance"},
          {"tolerance", bitwise ? 0.0 : tol},
          {"differences", differences},
          {"checks", checks}};
}

}  // namespace anchor::pipeline
