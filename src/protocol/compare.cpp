#include "anchor/protocol/compare.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "anchor/error.hpp"

namespace anchor::protocol {
namespace {

// Human names for the state groups, as the report prints them.
const char* group_label(const std::string& g) {
  if (g == "model") return "model parameters";
  if (g == "optimizer") return "optimizer state";
  if (g == "rng") return "RNG state";
  if (g == "scaler") return "loss scaler state";
  if (g == "step") return "step counter";
  return "state";
}

struct Checker {
  explicit Checker(double tolerance) : tol(tolerance), v(tolerance) {}
  double tol;
  Verdict v;

  void add(const std::string& name, bool ok, const std::string& detail, const std::string& state) {
    v.add({name, ok, detail, state});
  }

  bool close(double a, double b) const { return within_tolerance(a, b, tol); }

  // Differing tensors between two state digests, at most 5 named.
  static std::string differing_tensors(const train::StateDigest& a, const train::StateDigest& b,
                                       const std::string& group) {
    std::vector<std::string> names;
    const std::string prefix = group + "/";
    std::set<std::string> keys;
    for (const auto& [k, d] : a.tensors) keys.insert(k);
    for (const auto& [k, d] : b.tensors) keys.insert(k);
    for (const auto& k : keys) {
      if (k.rfind(prefix, 0) != 0) continue;
      const auto ia = a.tensors.find(k), ib = b.tensors.find(k);
      if (ia == a.tensors.end())
        names.push_back(k.substr(prefix.size()) + " (missing in reference)");
      else if (ib == b.tensors.end())
        names.push_back(k.substr(prefix.size()) + " (missing after restore)");
      else if (ia->second != ib->second)
        names.push_back(k.substr(prefix.size()));
    }
    std::string out;
    for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 5) out += ", and " + std::to_string(names.size() - 5) + " more";
    return out;
  }

  // A group's digest; none when the digest predates the group (the scaler).
  static std::optional<std::string> group_digest(const train::StateDigest& d, const std::string& g) {
    if (g == "model") return d.model;
    if (g == "optimizer") return d.optimizer;
    if (g == "rng") return d.rng;
    return d.scaler;
  }

  void states(const std::string& what, const train::StateDigest& a, const train::StateDigest& b) {
    for (const std::string g : {"model", "optimizer", "rng", "scaler"}) {
      const auto da = group_digest(a, g), db = group_digest(b, g);
      if (g == "scaler" && !da && !db) continue;  // digests from before the scaler
      if (!da || !db) {
        add(what + ": " + group_label(g), false, std::string("present on one side only"), g);
        continue;
      }
      const bool ok = *da == *db;
      std::string detail = ok ? "digest " + da->substr(0, 16) + " equal" : "differs in: " + differing_tensors(a, b, g);
      if (!ok && tol > 0 && g != "rng" && g != "scaler") {
        // Under a tolerance, parameters may legitimately differ in the last bits.
        add(what + ": " + group_label(g), true, "digest differs (allowed under tolerance): " + detail, g);
        continue;
      }
      add(what + ": " + group_label(g), ok, detail, g);
    }
    const bool ok = a.step == b.step;
    add(what + ": step counter", ok,
        ok ? "step " + std::to_string(a.step)
           : "reference at step " + std::to_string(a.step) + ", resumed at step " + std::to_string(b.step),
        "step");
  }

  void steps(const std::vector<train::StepRecord>& ra, const std::vector<train::StepRecord>& rb) {
    if (ra.size() != rb.size()) {
      add("resumed steps", false,
          "reference ran " + std::to_string(ra.size()) + " steps, resume ran " + std::to_string(rb.size()), "step");
      return;
    }
    for (size_t i = 0; i < ra.size(); ++i) {
      const auto& a = ra[i];
      const auto& b = rb[i];
      const std::string at = "step " + std::to_string(a.step);
      if (a.step != b.step) add(at + ": step number", false, "resume ran step " + std::to_string(b.step), "step");
      if (a.lr != b.lr)
        add(at + ": learning rate", false, "reference " + num(a.lr) + ", resumed " + num(b.lr), "lr_schedule");
      if (a.batch_digest != b.batch_digest)
        add(at + ": batch (data cursor)", false, "the resumed run saw different input tokens", "data_cursor");
      // The loss scaler (docs/precision.md): the scale used and whether the step was skipped.
      if (a.loss_scale != b.loss_scale || a.skipped != b.skipped)
        add(at + ": loss scale", false,
            "reference scale " + num(a.loss_scale) + (a.skipped ? " (skipped)" : "") + ", resumed " +
                num(b.loss_scale) + (b.skipped ? " (skipped)" : ""),
            "scaler");
      for (const auto& [f, x, y] :
           {std::tuple<const char*, double, double>{"loss", a.loss, b.loss}, {"grad_norm", a.grad_norm, b.grad_norm}}) {
        const bool ok = close(x, y);
        add(at + ": " + f, ok, ok ? "equal (" + num(x) + ")" : "reference " + num(x) + ", resumed " + num(y),
            f == std::string("loss") ? "loss" : "gradients");
      }
    }
  }

  // A figure as JSON writes it (shortest round-trip form): the report's details read as before.
  static std::string num(double v) { return nlohmann::json(v).dump(); }
};

nlohmann::json check_json(const Check& c) {
  nlohmann::json e = {{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}};
  if (!c.component.empty()) {
    e["component"] = c.component;
    e["state"] = c.component;  // its name in reports before the one verdict type (2026-12): kept for their readers
  }
  return e;
}

}  // namespace

void Verdict::add(Check c) {
  if (!c.ok && !c.component.empty() && std::find(diverged.begin(), diverged.end(), c.component) == diverged.end())
    diverged.push_back(c.component);
  checks.push_back(std::move(c));
}

nlohmann::json Verdict::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : checks) list.push_back(check_json(c));
  return {{"verdict", match() ? "match" : "mismatch"},
          {"mode", mode},
          {"tolerance", tolerance},
          {"cause", cause},
          {"diverged", diverged},
          {"checks", std::move(list)},
          {"saved_step", saved_step},
          {"restored_step", restored_step},
          {"last_step", last_step}};
}

bool within_tolerance(double a, double b, double tolerance) {
  if (tolerance <= 0 || !std::isfinite(a) || !std::isfinite(b)) return a == b;
  return std::fabs(a - b) <= tolerance * std::max({std::fabs(a), std::fabs(b), 1e-12});
}

Verdict compare_resume(const WorkerResult& ref, const WorkerResult& res, double tolerance) {
  if (!ref.saved_state || !ref.final_state || !ref.eval_loss || !ref.saved_step || !res.restored_state ||
      !res.final_state || !res.eval_loss || !res.restored_step)
    throw Error(ErrorKind::kRuntime, "compare_resume: a worker result without its state digests or eval loss",
                "read worker results with read_worker_result, which checks them");
  Checker c{tolerance};
  c.v.saved_step = *ref.saved_step;
  c.v.restored_step = *res.restored_step;
  c.v.last_step = ref.final_state->step;
  // 1. What was restored equals what was saved.
  c.states("restored vs saved", *ref.saved_state, *res.restored_state);
  const std::vector<std::string> restore_diverged = c.v.diverged;
  // 2. Eval after restore equals eval before save.
  {
    const double a = *ref.eval_loss, b = *res.eval_loss;
    const bool ok = c.close(a, b);
    c.add("eval after restore", ok,
          ok ? "equal (" + Checker::num(a) + ")"
             : "before save " + Checker::num(a) + ", after restore " + Checker::num(b),
          "eval");
  }
  // 3. The resumed steps follow the reference step by step.
  c.steps(ref.reference_steps, res.resume_steps);
  // 4. The final state after R steps.
  c.states("final", *ref.final_state, *res.final_state);

  Verdict v = std::move(c.v);
  // Root causes first (state that was restored wrongly), then their consequences.
  static const std::vector<std::string> kOrder = {"step",        "rng",         "optimizer", "scaler", "model",
                                                  "lr_schedule", "data_cursor", "eval",      "loss",   "gradients"};
  std::vector<std::string> diverged;
  for (const auto& s : kOrder)
    if (std::find(v.diverged.begin(), v.diverged.end(), s) != v.diverged.end()) diverged.push_back(s);
  // The cause: state restored wrongly, else the first figure that diverged.
  v.cause = restore_diverged;
  if (v.cause.empty() && !v.diverged.empty()) v.cause.push_back(v.diverged.front());
  v.diverged = std::move(diverged);
  return v;
}

RankVerdicts::RankVerdicts(std::vector<Verdict> all) : ranks(std::move(all)) {
  if (ranks.empty()) throw Error(ErrorKind::kRuntime, "RankVerdicts: no rank's verdict", "");
  combined = ranks.front();
  for (std::size_t rank = 1; rank < ranks.size(); ++rank) {
    const Verdict& v = ranks[rank];
    if (v.match()) continue;
    const std::string who = "rank " + std::to_string(rank) + ": ";
    for (const auto& c : v.cause) combined.cause.push_back(who + c);
    for (const auto& d : v.diverged) combined.diverged.push_back(who + d);
    for (const auto& c : v.checks)
      if (!c.ok) combined.checks.push_back({who + c.name, c.ok, c.detail, c.component});
  }
}

nlohmann::json RankVerdicts::per_rank_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t rank = 0; rank < ranks.size(); ++rank)
    out.push_back(
        {{"rank", rank}, {"verdict", ranks[rank].match() ? "match" : "mismatch"}, {"cause", ranks[rank].cause}});
  return out;
}

nlohmann::json RankVerdicts::to_json() const {
  nlohmann::json out = combined.to_json();
  out["per_rank"] = per_rank_json();
  return out;
}

}  // namespace anchor::protocol
