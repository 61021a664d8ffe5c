#pragma once
// trace.json: a pilot's events in the Chrome trace event format, for
// https://ui.perfetto.dev or chrome://tracing (docs/report.md, "trace.json").
// One process per event source (the supervisor, worker A, worker B, a user
// program's workers), one thread per rank; each stage a complete ("X") event
// from its start to its end, a stage that never ended (killed) drawn up to
// its process's last event; a program's steps and checkpoint saves as spans,
// its losses as a counter; the rest (worker started, kill window, SIGKILL
// sent) as instants.
#include <istream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

namespace anchor::run_report {

// Builds the trace from events.jsonl's lines. A line that is not a JSON
// object, or has no readable time, is left out and counted in
// otherData.skipped_lines; more than `max_lines` lines are not read
// (otherData.truncated). Never throws for what the stream holds.
nlohmann::json chrome_trace(std::istream& events_jsonl, std::size_t max_lines = 1000000);

// Seconds since the Unix epoch of an event's "time": anchor's ISO 8601 UTC
// ("2026-12-03T06:12:52.042Z") or a program's Unix seconds; nullopt otherwise.
std::optional<double> event_time(const nlohmann::json& event);

// Writes <run_dir>/trace.json (atomically) from <run_dir>/events.jsonl and
// returns it; when there is no events file, writes nothing and returns a
// trace without events.
nlohmann::json write_trace(const std::string& run_dir);

}  // namespace anchor::run_report
