#pragma once
// The built-in worker's side of the worker protocol's lines
// (worker_protocol.hpp): it prints each on stdout as "@anchor-event {json}";
// the supervisor parses it with protocol::parse_event, appends it to
// events.jsonl (flushed as it happens) and reacts to some (a stage, a step for
// the live line, the kill window, an error).
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::protocol {

inline constexpr const char* kEventPrefix = "@anchor-event ";

// Set ("stdin") in the environment of a built-in worker the supervisor starts
// early: the worker waits for the line "go" on its stdin before it reads its
// spec, so that its start-up (exec, LibTorch's load) overlaps the work before
// it (worker B's, worker A's). Not part of the worker protocol: a program is
// started when it is to run.
inline constexpr const char* kReleaseEnv = "ANCHOR_WORKER_RELEASE";

// Worker side: one line of the protocol (stamped now, rank 0) on stdout,
// flushed. Off (set_events_enabled(false)) on ranks other than 0 of a
// multi-rank worker: rank 0 speaks for the group.
void emit(protocol::Body line);
void set_events_enabled(bool on);

// Times one stage of a worker and emits its begin and end lines.
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

// Wall-clock UTC timestamp, ISO 8601 with milliseconds (report.json's created_at).
std::string utc_now();
// Wall-clock Unix seconds, to the microsecond: every events.jsonl line's `time`.
double unix_now();

}  // namespace anchor::protocol
