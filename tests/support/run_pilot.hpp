#pragma once
// A whole pilot (pilot::run_supervisor) run by a driver test against a fake
// worker or program (tests/unit/pilot/): in a forked child, since the signal
// flag and handlers are the process's, with the fake's script in one
// environment variable; then what the run left: its exit code or what it
// threw, report.json and the JUnit file.
#include <stdlib.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/error.hpp"
#include "anchor/pilot/pilot.hpp"
#include "support/in_child.hpp"

namespace anchor::test {

struct PilotRan {
  int code = -1;      // the exit code run_supervisor returned; -1: it threw or hung
  std::string threw;  // what it threw (an Error before the run directory), else ""
  ErrorKind threw_kind = ErrorKind::kRuntime;
  nlohmann::json report;  // report.json, when there is one
  std::string junit;      // the JUnit file, when there is one
  std::string run_dir;    // where it ran (PilotOptions::run_dir)
  std::string message() const { return report.value("message", std::string()); }
};

// Runs the pilot `o` describes with `env`=`script` set; fails the test when it
// does not end within `deadline_s`. o.run_dir and o.junit_path name where it writes.
inline PilotRan run_pilot(const pilot::PilotOptions& o, const char* env, const std::string& script,
                          double deadline_s = 30) {
  PilotRan r;
  r.run_dir = o.run_dir;
  const auto out = in_child(
      [&] {
        ::setenv(env, script.c_str(), 1);
        return std::to_string(static_cast<int>(pilot::run_supervisor(o)));
      },
      deadline_s);
  EXPECT_FALSE(out.timed_out) << "the pilot did not end within " << deadline_s << " s: " << script;
  if (out.threw) {
    r.threw = out.text;
    r.threw_kind = out.kind;
  } else if (!out.text.empty()) {
    r.code = std::stoi(out.text);
  }
  if (std::filesystem::exists(o.run_dir + "/report.json"))
    r.report = nlohmann::json::parse(fs::read_file(o.run_dir + "/report.json"));
  if (!o.junit_path.empty() && std::filesystem::exists(o.junit_path)) r.junit = fs::read_file(o.junit_path);
  return r;
}

// The report's record of stage `name`, or null.
inline const nlohmann::json* stage_of(const nlohmann::json& report, const std::string& name) {
  const auto stages = report.find("stages");
  if (stages == report.end() || !stages->is_array()) return nullptr;
  for (const auto& s : *stages)
    if (s.value("stage", "") == name) return &s;
  return nullptr;
}

}  // namespace anchor::test
