#pragma once
// Stage events: workers print them on stdout as "@anchor-event {json}" lines;
// the supervisor appends each to events.jsonl (flushed as it happens) and
// reacts to some (the kill window).
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace anchor::pipeline {

inline constexpr const char* kEventPrefix = "@anchor-event ";

// Worker side: one line on stdout, flushed. Off (set_events_enabled(false)) on
// ranks other than 0 of a multi-rank worker: rank 0 speaks for the group.
void emit_event(const nlohmann::json& event);
void set_events_enabled(bool on);

// Times one stage of a worker and emits its start and end events.
class StageTimer {
 public:
  explicit StageTimer(std::string name);
  // Ends the stage as passed with `figures`; returns the stage record.
  nlohmann::json end(nlohmann::json figures = nlohmann::json::object());
  double elapsed() const;

 private:
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
};

// Wall-clock UTC timestamp, ISO 8601 with milliseconds.
std::string utc_now();

}  // namespace anchor::pipeline
