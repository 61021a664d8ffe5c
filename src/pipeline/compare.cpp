#include "anchor/pipeline/compare.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace anchor::pipeline {
namespace {

// Human names for the state groups, as the report prints them.
const char* group_label(const std::string& g) {
  if (g == "model") return "model parameters";
  if (g == "optimizer") return "optimizer state";
  if (g == "rng") return "RNG state";
  if (g == "step") return "step counter";
  return "state";
}

struct Checker {
  explicit Checker(double tolerance) : tol(tolerance) {}
  double tol;
  nlohmann::json checks = nlohmann::json::array();
  std::set<std::string> diverged;
  std::vector<std::string> order;

  void add(const std::string& name, bool ok, const std::string& detail, const std::string& state) {
    checks.push_back({{"name", name}, {"ok", ok}, {"detail", detail}, {"state", state}});
    if (!ok && diverged.insert(state).second) order.push_back(state);
  }

  bool close(double a, double b) const {
    if (tol <= 0) return a == b;
    return std::fabs(a - b) <= tol * std::max({std::fabs(a), std::fabs(b), 1e-12});
  }

  // Differing tensors between two state digests, at most 5 named.
  static std::string differing_tensors(const nlohmann::json& a, const nlohmann::json& b, const std::string& group) {
    std::vector<std::string> names;
    const auto& ta = a.value("tensors", nlohmann::json::object());
    const auto& tb = b.value("tensors", nlohmann::json::object());
    const std::string prefix = group + "/";
    std::set<std::string> keys;
    for (auto it = ta.begin(); it != ta.end(); ++it) keys.insert(it.key());
    for (auto it = tb.begin(); it != tb.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      if (k.rfind(prefix, 0) != 0) continue;
      if (!ta.contains(k)) names.push_back(k.substr(prefix.size()) + " (missing in reference)");
      else if (!tb.contains(k)) names.push_back(k.substr(prefix.size()) + " (missing after restore)");
      else if (ta[k] != tb[k]) names.push_back(k.substr(prefix.size()));
    }
    std::string out;
    for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 5) out += ", and " + std::to_string(names.size() - 5) + " more";
    return out;
  }

  void states(const std::string& what, const nlohmann::json& a, const nlohmann::json& b) {
    for (const char* g : {"model", "optimizer", "rng"}) {
      const bool ok = a.at(g) == b.at(g);
      std::string detail = ok ? "digest " + a.at(g).get<std::string>().substr(0, 16) + " equal"
                              : "differs in: " + differing_tensors(a, b, g);
      if (!ok && tol > 0 && std::string(g) != "rng") {
        // Under a tolerance, parameters may legitimately differ in the last bits.
        add(what + ": " + group_label(g), true, "digest differs (allowed under tolerance): " + detail, g);
        continue;
      }
      add(what + ": " + group_label(g), ok, detail, g);
    }
    const bool ok = a.at("step") == b.at("step");
    add(what + ": step counter", ok,
        ok ? "step " + a.at("step").dump()
           : "reference at step " + a.at("step").dump() + ", resumed at step " + b.at("step").dump(),
        "step");
  }

  void steps(const nlohmann::json& ra, const nlohmann::json& rb) {
    if (ra.size() != rb.size()) {
      add("resumed steps", false,
          "reference ran " + std::to_string(ra.size()) + " steps, resume ran " + std::to_string(rb.size()), "step");
      return;
    }
    for (size_t i = 0; i < ra.size(); ++i) {
      const auto& a = ra[i];
      const auto& b = rb[i];
      const std::string at = "step " + a.at("step").dump();
      if (a.at("step") != b.at("step"))
        add(at + ": step number", false, "resume ran step " + b.at("step").dump(), "step");
      if (a.at("lr").get<double>() != b.at("lr").get<double>())
        add(at + ": learning rate", false, "reference " + a.at("lr").dump() + ", resumed " + b.at("lr").dump(),
            "lr_schedule");
      if (a.at("batch_digest") != b.at("batch_digest"))
        add(at + ": batch (data cursor)", false, "the resumed run saw different input tokens", "data_cursor");
      for (const char* f : {"loss", "grad_norm"}) {
        const double x = a.at(f).get<double>(), y = b.at(f).get<double>();
        const bool ok = close(x, y);
        add(at + ": " + f, ok, ok ? "equal (" + a.at(f).dump() + ")"
                                  : "reference " + a.at(f).dump() + ", resumed " + b.at(f).dump(),
            f == std::string("loss") ? "loss" : "gradients");
      }
    }
  }
};

}  // namespace

nlohmann::json compare_resume(const nlohmann::json& ref, const nlohmann::json& res, double tolerance) {
  Checker c{tolerance};
  // 1. What was restored equals what was saved.
  c.states("restored vs saved", ref.at("saved_state"), res.at("restored_state"));
  const std::vector<std::string> restore_diverged = c.order;
  // 2. Eval after restore equals eval before save.
  {
    const double a = ref.at("eval_loss").get<double>(), b = res.at("eval_loss").get<double>();
    const bool ok = c.close(a, b);
    c.add("eval after restore", ok,
          ok ? "equal (" + ref.at("eval_loss").dump() + ")"
             : "before save " + ref.at("eval_loss").dump() + ", after restore " + res.at("eval_loss").dump(),
          "eval");
  }
  // 3. The resumed steps follow the reference step by step.
  c.steps(ref.at("reference_steps"), res.at("resume_steps"));
  // 4. The final state after R steps.
  c.states("final", ref.at("final_state"), res.at("final_state"));

  nlohmann::json diverged = nlohmann::json::array();
  // Root causes first (state that was restored wrongly), then their consequences.
  static const std::vector<std::string> kOrder = {"step",      "rng",  "optimizer", "model", "lr_schedule",
                                                  "data_cursor", "eval", "loss",      "gradients"};
  for (const auto& s : kOrder)
    if (c.diverged.count(s)) diverged.push_back(s);
  // The cause: state restored wrongly, else the first figure that diverged.
  nlohmann::json cause = nlohmann::json::array();
  for (const auto& s : restore_diverged) cause.push_back(s);
  if (cause.empty() && !c.order.empty()) cause.push_back(c.order.front());
  return {{"verdict", c.diverged.empty() ? "match" : "mismatch"},
          {"cause", cause},
          {"mode", tolerance > 0 ? "tolerance" : "bitwise"},
          {"tolerance", tolerance},
          {"diverged", diverged},
          {"checks", c.checks}};
}

}  // namespace anchor::pipeline
