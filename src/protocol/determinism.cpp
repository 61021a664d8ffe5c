#include "anchor/protocol/determinism.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

namespace anchor::protocol {
namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();
// A program that does not repeat itself can differ in the last bits of any figure, most of them float32:
// a few of its units in the last place (2^-23 = 1.2e-7) are within the run-to-run difference whatever
// one sample of it measured.
constexpr double kToleranceFloor = 1e-6;

// |a - b| / max(|a|, |b|, 1e-12), as within_tolerance measures it; 0 when equal
// (unknown equals unknown), inf when only one is known or either is not finite.
double rel_difference(const Number& a, const Number& b) {
  if (a == b) return 0;
  if (!a.known || !b.known || !std::isfinite(a.value) || !std::isfinite(b.value)) return kUnbounded;
  return std::fabs(a.value - b.value) / std::max({std::fabs(a.value), std::fabs(b.value), 1e-12});
}

std::string rel_text(double v) {
  if (std::isinf(v)) return "not finite on one side";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

std::string control_steps_words(std::int64_t from, std::int64_t last) {
  return from + 1 == last ? "step " + std::to_string(last)
                          : "steps " + std::to_string(from + 1) + " to " + std::to_string(last);
}

}  // namespace

void RunDifference::add(const WorkerLog& a, const WorkerLog& b, std::int64_t from, std::int64_t last, int rank) {
  const std::string on = rank > 0 ? " (rank " + std::to_string(rank) + ")" : "";
  auto differs = [&](const std::string& what, double rel) {
    max_relative = std::max(max_relative, rel);
    if (same) first = what + on;
    same = false;
  };
  std::map<std::int64_t, const StepLine*> a_steps;
  for (const auto& s : a.steps)
    if (s.step > from && s.step <= last) a_steps[s.step] = &s;
  std::map<std::int64_t, const StepLine*> b_steps;
  for (const auto& s : b.steps)
    if (s.step > from && s.step <= last) b_steps[s.step] = &s;
  for (std::int64_t step = from + 1; step <= last; ++step) {
    const auto ia = a_steps.find(step), ib = b_steps.find(step);
    if (ia == a_steps.end() || ib == b_steps.end()) {
      if (ia != a_steps.end() || ib != b_steps.end()) differs("step " + std::to_string(step) + " run once", kUnbounded);
      continue;
    }
    ++steps;
    const StepLine &x = *ia->second, &y = *ib->second;
    for (const auto& [name, n1, n2] : {std::tuple<const char*, const Number&, const Number&>{"loss", x.loss, y.loss},
                                       {"grad norm", x.grad_norm, y.grad_norm},
                                       {"lr", x.lr, y.lr}})
      if (const double rel = rel_difference(n1, n2); rel > 0 || !(n1 == n2))
        differs(std::string(name) + " at step " + std::to_string(step), rel);
  }
  const DigestsLine *da = a.digests_at("save", last), *db = b.digests_at("save", last);
  if (!da || !db) return;
  for (const auto& [name, digest] : da->components) {
    const std::string* other = db->find(name);
    if (other && *other == digest) continue;
    if (std::find(state.begin(), state.end(), name) == state.end()) state.push_back(name);
    if (same) first = "the state at step " + std::to_string(last) + on + ": " + name;
    same = false;
  }
}

nlohmann::json RunDifference::to_json() const {
  nlohmann::json j = {{"same", same}, {"steps", steps}, {"state_differs", state}};
  j["max_relative"] = std::isinf(max_relative) ? nlohmann::json("inf") : nlohmann::json(max_relative);
  if (!first.empty()) j["first"] = first;
  return j;
}

double suggest_tolerance(double max_relative) {
  if (max_relative <= 0) return 0;
  if (!std::isfinite(max_relative)) return kUnbounded;
  const double t = std::pow(10.0, std::ceil(std::log10(4 * max_relative)));
  return std::max(t, kToleranceFloor);
}

DeterminismVerdict judge_determinism(const RunDifference& control, const RunDifference& resume, std::int64_t from,
                                     std::int64_t last) {
  DeterminismVerdict v;
  v.control = control;
  v.resume = resume;
  v.from = from;
  v.last = last;
  if (control.same) return v;
  // A difference only in the final state still asks for a tolerance: the floor.
  v.suggested_tolerance = control.max_relative > 0 ? suggest_tolerance(control.max_relative) : kToleranceFloor;
  v.finding = std::isfinite(v.suggested_tolerance) && resume.max_relative <= v.suggested_tolerance
                  ? Finding::kNondeterministic
                  : Finding::kBoth;
  return v;
}

const char* DeterminismVerdict::finding_name() const {
  switch (finding) {
    case Finding::kRepeatable: return "repeatable";
    case Finding::kNondeterministic: return "nondeterministic";
    case Finding::kBoth: return "nondeterministic and resume";
  }
  return "repeatable";
}

std::string DeterminismVerdict::words(bool resume_matched) const {
  const std::string ran = "The determinism control ran " + control_steps_words(from, last) +
                          " a second time from the same save of step " + std::to_string(from);
  if (finding == Finding::kRepeatable)
    return ran +
           ", and the two runs agree bitwise (the loss, gradient norm and lr of every step, and the state at step " +
           std::to_string(last) + "). " +
           (resume_matched ? "Your program repeats itself from a restored state."
                           : "Your program repeats itself, so its difference from the uninterrupted run comes from "
                             "the resume, not from nondeterministic kernels: the checks above say what did not "
                             "come back.");
  const std::string differ =
      ", and the two runs differ from each other: " + control.first +
      (control.max_relative > 0 ? ", relative difference up to " + rel_text(control.max_relative) : "") +
      ". Your program does not repeat itself from the same state (nondeterministic kernels, "
      "or a seed taken from the clock or os.urandom)";
  const std::string fix =
      "make the steps deterministic (torch.use_deterministic_algorithms(True), every seed from "
      "the run's) to keep a bitwise check";
  if (finding == Finding::kNondeterministic) {
    char tol[32];
    std::snprintf(tol, sizeof tol, "%g", suggested_tolerance);
    return ran + differ +
           (resume_matched ? ""
                           : ", and the resume's difference from the uninterrupted run (" +
                                 (resume.max_relative > 0 ? "up to " + rel_text(resume.max_relative)
                                                          : std::string("in the state only")) +
                                 ") is within it") +
           ". Set pilot.tolerance: " + tol + " to compare within that difference, or " + fix + ".";
  }
  return ran + differ + ", but the resume differs from the uninterrupted run by more (" + resume.first +
         ", relative difference up to " + rel_text(resume.max_relative) +
         "): beyond the program's own run-to-run difference, the resume did not bring the run back as it was; "
         "the checks above say what.";
}

nlohmann::json DeterminismVerdict::to_json() const {
  nlohmann::json j = {{"finding", finding_name()},
                      {"from_step", from},
                      {"last_step", last},
                      {"control", control.to_json()},
                      {"resume", resume.to_json()}};
  if (finding != Finding::kRepeatable)
    j["suggested_tolerance"] = std::isfinite(suggested_tolerance) ? nlohmann::json(suggested_tolerance) : nullptr;
  return j;
}

}  // namespace anchor::protocol
