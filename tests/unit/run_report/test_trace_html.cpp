// trace.json (include/anchor/run_report/trace.hpp) and report.html (report_html.hpp) from
// what a report and an events file can hold, hostile text included. The
// browser's view of a real pilot's page is tests/e2e/test_report_html.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>

#include "anchor/run_report/report_html.hpp"
#include "anchor/run_report/report_writer.hpp"
#include "anchor/run_report/trace.hpp"

using anchor::run_report::chrome_trace;
using anchor::run_report::event_time;
using nlohmann::json;

namespace {

// report.html of a report as report.json holds it.
std::string report_html(const json& report, const json& trace) {
  return anchor::run_report::report_html(anchor::run_report::RunReport::from_json(report), trace);
}

json trace_of(const std::string& lines, std::size_t max_lines = 1000000) {
  std::istringstream in(lines);
  return chrome_trace(in, max_lines);
}

// The trace events with this phase and name.
std::vector<json> find(const json& trace, const std::string& ph, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == ph && e.value("name", "") == name) out.push_back(e);
  return out;
}

std::string process_name(const json& trace, int pid) {
  for (const auto& e : find(trace, "M", "process_name"))
    if (e["pid"] == pid) return e["args"]["name"];
  return "";
}

const char* kPilotEvents =
    R"({"event":"worker_started","pids":[11],"source":"supervisor","time":"2026-12-03T06:12:51.000Z","worker":"reference"}
{"type":"stage","phase":"begin","rank":0,"source":"worker-reference","stage":"pin","time":1796278372.0}
{"type":"stage","phase":"end","rank":0,"seconds":0.25,"source":"worker-reference","stage":"pin","status":"passed","time":1796278372.25}
not json at all
{"type":"stage","phase":"begin","rank":0,"source":"worker-reference","stage":"kill","time":1796278372.5}
{"type":"checkpoint","op":"save","phase":"kill_window","step":4,"dir":"ck/step-00000004","point":"after_file:model.safetensors","rank":0,"source":"worker-reference","time":1796278372.6}
{"event":"sigkill_sent","pids":[11],"source":"supervisor","stage":"kill","time":"2026-12-03T06:12:52.601Z"}
{"type":"stage","phase":"begin","rank":0,"source":"worker-resume","stage":"restore","note":"a clock with no time","time":"yesterday"}
{"type":"stage","phase":"begin","rank":0,"source":"worker-resume","stage":"restore","time":1796278373.0}
{"type":"stage","phase":"end","rank":0,"seconds":0.5,"source":"worker-resume","stage":"restore","status":"passed","time":1796278373.5}
{"event":"end","error":"boom","source":"supervisor","stage":"compare","status":"failed","time":"2026-12-03T06:12:54.000Z"})";

TEST(Trace, EachStageIsASpanOfItsProcessAndTheKillIsMarked) {
  const json t = trace_of(kPilotEvents);
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  EXPECT_EQ(t["otherData"]["skipped_lines"], 2) << "the line that is not JSON and the one whose time is not a time";
  EXPECT_DOUBLE_EQ(t["otherData"]["start_unix_s"].get<double>(), 1796278371.0);

  // One process per source, named as the console names the workers.
  const auto pin = find(t, "X", "pin");
  ASSERT_EQ(pin.size(), 1u);
  EXPECT_EQ(process_name(t, pin[0]["pid"]), "worker A (reference)");
  EXPECT_EQ(pin[0]["ts"], 1e6) << "microseconds from the first event";
  EXPECT_EQ(pin[0]["dur"], 250000.0) << "the worker's own clock of the stage";
  EXPECT_EQ(pin[0]["args"]["status"], "passed");
  const auto restore = find(t, "X", "restore");
  ASSERT_EQ(restore.size(), 1u);
  EXPECT_EQ(process_name(t, restore[0]["pid"]), "worker B (resume)");
  EXPECT_NE(restore[0]["pid"], pin[0]["pid"]);

  // The stage SIGKILL cut short: drawn to its process's last event, and said so.
  const auto kill = find(t, "X", "kill");
  ASSERT_EQ(kill.size(), 1u);
  EXPECT_EQ(kill[0]["ts"], 1.5e6);
  EXPECT_EQ(kill[0]["dur"], 100000.0);
  EXPECT_NE(kill[0]["args"]["status"].get<std::string>().find("did not end"), std::string::npos);
  const auto sigkill = find(t, "i", "sigkill_sent");
  ASSERT_EQ(sigkill.size(), 1u);
  EXPECT_EQ(sigkill[0]["s"], "g") << "the kill is drawn across every process";
  EXPECT_EQ(process_name(t, sigkill[0]["pid"]), "supervisor");
  EXPECT_EQ(find(t, "i", "kill_window").size(), 1u);

  // An end with no start (the supervisor failing a stage) is a moment with its error.
  const auto failed = find(t, "i", "compare failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]["args"]["error"], "boom");
}

TEST(Trace, AProgramsStepsAndSavesAreSpansPerRankAndItsLossACounter) {
  const json t = trace_of(
      R"({"type":"step","rank":1,"time":1000.5,"step":3,"loss":2.5,"data_wait_s":0.1,"compute_s":0.4,"source":"program-reference"}
{"type":"checkpoint","op":"save","phase":"begin","rank":0,"time":1001.0,"step":3,"source":"program-reference"}
{"type":"checkpoint","op":"save","phase":"end","rank":0,"time":1001.25,"step":3,"bytes":10,"seconds":0.25,"source":"program-reference"}
{"type":"checkpoint","op":"save","phase":"kill_window","rank":0,"time":1001.5,"step":4,"point":"x","source":"program-reference"}
)");
  const auto step = find(t, "X", "step 3");
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0]["tid"], 1) << "a rank is a thread of its worker";
  EXPECT_EQ(step[0]["dur"], 500000.0);
  EXPECT_EQ(step[0]["ts"], 0.0) << "a step ends when it is reported: it began data wait + compute earlier, "
                                   "and the trace starts there, no ts negative";
  EXPECT_DOUBLE_EQ(t["otherData"]["start_unix_s"].get<double>(), 1000.0);
  EXPECT_EQ(process_name(t, step[0]["pid"]), "program, worker A (reference)");
  ASSERT_EQ(find(t, "C", "loss").size(), 1u);
  EXPECT_EQ(find(t, "C", "loss")[0]["args"]["rank 1"], 2.5);
  const auto save = find(t, "X", "save step 3");
  ASSERT_EQ(save.size(), 1u);
  EXPECT_EQ(save[0]["ts"], 1000000.0);
  EXPECT_EQ(save[0]["dur"], 250000.0);
  EXPECT_EQ(find(t, "i", "kill_window").size(), 1u);
  bool rank1_named = false;
  for (const auto& e : find(t, "M", "thread_name")) rank1_named |= e["tid"] == 1 && e["args"]["name"] == "rank 1";
  EXPECT_TRUE(rank1_named);
}

// A program's line keeps its fields in events.jsonl: one that says "stage"
// (either way the built-in worker or the supervisor says it) or "sigkill_sent"
// draws neither a stage nor a kill across the trace; a step
// number past 2^53 is shown as written.
TEST(Trace, AProgramCannotDrawAStageOrAKill) {
  const json t = trace_of(
      R"({"type":"note","event":"start","stage":"pin","rank":0,"time":1000.0,"source":"program-reference"}
{"type":"note","event":"end","stage":"pin","status":"passed","rank":0,"time":1001.0,"source":"program-reference"}
{"type":"stage","phase":"begin","stage":"pin","rank":0,"time":1001.1,"source":"program-reference"}
{"type":"stage","phase":"end","stage":"pin","status":"passed","rank":0,"time":1001.2,"source":"program-reference"}
{"type":"note","event":"sigkill_sent","rank":0,"time":1001.5,"source":"program-reference"}
{"type":"step","rank":0,"time":1002.0,"step":9223372036854775807,"loss":1,"data_wait_s":1e300,"compute_s":0.5,"source":"program-reference"}
)");
  EXPECT_TRUE(find(t, "X", "pin").empty()) << t.dump();
  for (const auto& e : find(t, "i", "sigkill_sent")) EXPECT_EQ(e["s"], "t") << "not drawn across every process";
  const auto step = find(t, "X", "step 9223372036854775807");
  ASSERT_EQ(step.size(), 1u) << t.dump();
  EXPECT_EQ(step[0]["dur"], 500000.0) << "a data wait of 1e300 s is not a time";
}

// Stages end and start within the same millisecond: the spans of one process
// never overlap (Perfetto drops one that overlaps without nesting), whatever
// the worker's own, finer clock says (kept in args.seconds).
TEST(Trace, BackToBackStagesDoNotOverlap) {
  const json t = trace_of(
      R"({"event":"start","source":"worker-reference","stage":"load","time":"2026-12-03T06:12:52.391Z"}
{"event":"end","seconds":0.0019,"source":"worker-reference","stage":"load","status":"passed","time":"2026-12-03T06:12:52.392Z"}
{"event":"start","source":"worker-reference","stage":"train","time":"2026-12-03T06:12:52.392Z"}
{"event":"end","seconds":0.07,"source":"worker-reference","stage":"train","status":"passed","time":"2026-12-03T06:12:52.462Z"}
)");
  const auto load = find(t, "X", "load"), train = find(t, "X", "train");
  ASSERT_EQ(load.size(), 1u);
  ASSERT_EQ(train.size(), 1u);
  EXPECT_LE(load[0]["ts"].get<double>() + load[0]["dur"].get<double>(), train[0]["ts"].get<double>());
  EXPECT_EQ(load[0]["args"]["seconds"], 0.0019);
}

TEST(Trace, ReadsNoMoreThanItsLineLimit) {
  std::string lines;
  for (int i = 0; i < 10; ++i)
    lines += R"({"event":"x","source":"supervisor","time":"2026-12-03T06:12:5)" + std::to_string(i) +
             R"(.000Z"})"
             "\n";
  const json t = trace_of(lines, 4);
  EXPECT_EQ(t["otherData"]["truncated"], true);
  EXPECT_EQ(find(t, "i", "x").size(), 4u);
  EXPECT_FALSE(trace_of(lines)["otherData"].contains("truncated")) << "control: all ten read";
  EXPECT_EQ(find(trace_of(lines), "i", "x").size(), 10u);
}

TEST(Trace, EventTimeReadsAnchorsAndAProgramsClocksAndNothingElse) {
  EXPECT_DOUBLE_EQ(*event_time({{"time", "1970-01-01T00:00:01.250Z"}}), 1.25);
  EXPECT_DOUBLE_EQ(*event_time({{"time", 1796278371.5}}), 1796278371.5);
  for (const json& bad : {json{{"time", "2026-12-03T06:12:52.042"}}, json{{"time", "2026-12-03T06:12:52.042Z+"}},
                          json{{"time", "2026-12-03 06:12:52.042Z"}}, json{{"time", -1}}, json{{"time", nullptr}},
                          json{{"time", "2026-13-03T06:12:52.042Z"}}, json{{"time", "2026-02-30T06:12:52.042Z"}},
                          json{{"time", "2026-12-03T06:12:61.042Z"}}, json{{"time", "2026-12-00T06:12:52.042Z"}},
                          json{{"when", "2026-12-03T06:12:52.042Z"}}})
    EXPECT_FALSE(event_time(bad).has_value()) << bad.dump();
}

json small_report() {
  json steps_a = json::array(), steps_b = json::array();
  for (int s = 0; s < 4; ++s) {
    json st = {{"step", s},
               {"loss", 5.0 - 0.1 * s},
               {"grad_norm", 1.0 + s},
               {"lr", 1e-4 * (s + 1)},
               {"data_wait_s", 0.001},
               {"compute_s", 0.02},
               {"comm_s", 0.0}};
    (s < 2 ? steps_a : steps_b).push_back(st);
  }
  return {{"run_id", "pilot-1"},
          {"status", "passed"},
          {"message", "resume matches"},
          {"stages", json::array({{{"stage", "train"}, {"status", "passed"}, {"seconds", 0.5}}})},
          {"steps", {{"train", steps_a}, {"reference", steps_b}, {"resume", steps_b}}},
          {"resume",
           {{"verdict", "match"},
            {"mode", "bitwise"},
            {"saved_step", 2},
            {"restored_step", 2},
            {"checks", json::array({{{"name", "model"}, {"ok", true}, {"detail", "equal"}}})}}},
          {"measurements",
           {{"memory",
             {{"device_total_bytes", 80e9},
              {"stages", {{"train", {{"peak_allocated_bytes", 1e9}, {"peak_reserved_bytes", 2e9}}}}}}}}}};
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportHtml, DrawsTheLossOfBothWorkersWithTheSaveMarkedAndNeedsNothingFetched) {
  const std::string html = report_html(small_report(), trace_of(kPilotEvents));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos) << "the page may fetch nothing";
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  for (const char* chart : {"loss", "grad_norm", "lr", "step_time", "memory", "timeline"})
    EXPECT_NE(html.find("data-chart=\"" + std::string(chart) + "\""), std::string::npos) << chart;
  // Worker A's four steps (train + reference) and B's two, on each of loss, grad norm and lr.
  EXPECT_EQ(count(html, "<polyline"), 6u);
  EXPECT_EQ(count(html, "worker A (uninterrupted): step "), 12u);
  EXPECT_EQ(count(html, "worker B (resumed): step "), 6u);
  EXPECT_NE(html.find("saved at step 2, killed, B restored it"), std::string::npos);
  EXPECT_NE(html.find("against the device&#39;s 80.00 GB"), std::string::npos);
  EXPECT_NE(html.find("device total</text>"), std::string::npos) << "the capacity line";
  EXPECT_NE(html.find("SIGKILL</text>"), std::string::npos) << "the kill on the stage time line";
}

// A user program's pilot: its steps are steps.train and steps.resumed, numbered from 1.
TEST(ReportHtml, AProgramPilotsResumedStepsAreDrawnAsTheProgramNumbersThem) {
  json r = small_report();
  r["program"] = {{"command", json::array({"python3", "train.py"})}};
  for (auto* part : {&r["steps"]["train"], &r["steps"]["reference"], &r["steps"]["resume"]})
    for (auto& st : *part) st["step"] = st["step"].get<int>() + 1;
  r["steps"]["resumed"] = r["steps"]["resume"];
  r["steps"].erase("resume");
  const std::string html = report_html(r, json());
  EXPECT_EQ(count(html, "worker B (resumed): step "), 6u) << "B's two steps on loss, grad norm and lr";
  EXPECT_NE(html.find("worker A (uninterrupted): step 1, "), std::string::npos);
  EXPECT_EQ(html.find("worker A (uninterrupted): step 5, "), std::string::npos) << "not shifted by one";
}

// A long run: a line has at most 400 points and dots only up to 60; the step
// time split of 1000 steps is 30 bars of means.
TEST(ReportHtml, ALongRunIsDrawnWithinBounds) {
  json r = small_report();
  json many = json::array();
  for (int s = 0; s < 1000; ++s)
    many.push_back({{"step", s},
                    {"loss", 5.0 - s * 1e-3},
                    {"grad_norm", 1.0},
                    {"lr", 1e-4},
                    {"data_wait_s", 0.001},
                    {"compute_s", 0.02},
                    {"comm_s", 0.0}});
  r["steps"]["train"] = many;
  const std::string html = report_html(r, json());
  EXPECT_EQ(count(html, "worker A (uninterrupted): step "), 0u) << "no dots on a line of 400 points";
  EXPECT_NE(html.find("steps 1-34 (mean)"), std::string::npos);
  EXPECT_LT(html.size(), 200000u);
  const auto loss = html.find("data-chart=\"loss\"");
  const auto line = html.find("points=\"", loss);
  const auto end = html.find('"', line + 8);
  EXPECT_LE(std::count(html.begin() + line, html.begin() + end, ','), 400 + 2) << "x,y pairs on worker A's line";
}

TEST(ReportHtml, EscapesWhatTheReportAndTheTraceHold) {
  json r = small_report();
  r["run_id"] = "<script>alert(1)</script>";
  r["message"] = "a & b \"quoted\" 'single'";
  r["stages"][0]["stage"] = "\"><img src=x onerror=alert(1)>";
  r["resume"]["checks"][0]["detail"] = std::string("bytes \xff\xfe not UTF-8");
  r["measurements"]["memory"]["stages"] = {{"<b>train</b>", {{"peak_allocated_bytes", 1e9}}}};
  const json t = trace_of(
      R"({"event":"start","source":"<svg onload=alert(1)>","stage":"</title><script>x()</script>","time":"2026-12-03T06:12:52.000Z"}
{"event":"end","seconds":1,"source":"<svg onload=alert(1)>","stage":"</title><script>x()</script>","status":"passed","time":"2026-12-03T06:12:53.000Z"}
)");
  const std::string html = report_html(r, t);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<b>train"), std::string::npos);
  EXPECT_EQ(html.find("<svg onload"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("a &amp; b &quot;quoted&quot; &#39;single&#39;"), std::string::npos);
  EXPECT_NE(html.find("bytes \\xff\\xfe not UTF-8"), std::string::npos) << "bytes that are not UTF-8, as \\xNN";
}

TEST(ReportHtml, AReportWithoutDataSaysSoInsteadOfDrawing) {
  const std::string html = report_html(json{{"run_id", "r"}, {"status", "failed"}, {"message", "config: bad"}}, json());
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("no resume comparison"), std::string::npos);
  EXPECT_NE(html.find("no stage events"), std::string::npos);
  EXPECT_GE(count(html, "no data in the report"), 4u) << "loss, grad norm, lr, step time, memory";
  // Values of the wrong type are not drawn and do not throw.
  json odd = small_report();
  odd["steps"]["train"][0]["loss"] = "NaN";
  odd["steps"]["reference"] = "not a list";
  odd["measurements"]["memory"]["stages"]["train"] = 7;
  odd["resume"]["saved_step"] = nullptr;
  std::string page;
  ASSERT_NO_THROW(page = report_html(odd, json::array()));
  EXPECT_EQ(count(page, "worker A (uninterrupted): step "), 5u)
      << "A's two train steps on grad norm and lr, one on loss";
}

// report.html and trace.json are views: one that cannot be written (here
// trace.json is a directory, so the rename onto it fails) is a warning, the
// report itself is written and no half of the views is left.
TEST(ReportHtml, AViewThatCannotBeWrittenDoesNotStopTheReport) {
  namespace stdfs = std::filesystem;
  const stdfs::path dir = stdfs::temp_directory_path() / ("anchor-views-" + std::to_string(::getpid()));
  stdfs::remove_all(dir);
  stdfs::create_directories(dir / "trace.json");
  std::ofstream(dir / "events.jsonl") << kPilotEvents;
  std::ofstream(dir / "report.html") << "a stale page";
  anchor::run_report::Report report;
  report.set_outcome("passed", anchor::ExitCode::kOk, "fine");
  report.set_section("stages", json::array());
  ASSERT_NO_THROW(report.write(dir.string()));
  EXPECT_TRUE(stdfs::exists(dir / "report.json"));
  EXPECT_TRUE(stdfs::exists(dir / "report.md"));
  EXPECT_FALSE(stdfs::exists(dir / "report.html")) << "no stale page to be signed as this run's";
  // Control: with trace.json free, both views are written.
  stdfs::remove_all(dir / "trace.json");
  report.write(dir.string());
  EXPECT_TRUE(stdfs::is_regular_file(dir / "trace.json"));
  EXPECT_TRUE(stdfs::is_regular_file(dir / "report.html"));
  stdfs::remove_all(dir);
}

}  // namespace

// The built-in worker's restore: its begin line names no step (it does not
// know which until it has verified one), its end does; one span from the
// begin to the end, not a span left open to the process's last event.
TEST(Trace, ARestoreThatBeginsWithoutAStepEndsWithIt) {
  const json t = trace_of(
      R"({"type":"checkpoint","op":"restore","phase":"begin","dir":"/c","rank":0,"time":1000.0,"source":"worker-resume"}
{"type":"checkpoint","op":"restore","phase":"skip","dir":"/c/step-00000004.tmp-1","problems":["torn"],"rank":0,"time":1000.1,"source":"worker-resume"}
{"type":"checkpoint","op":"restore","phase":"end","dir":"/c/step-00000002","step":2,"bytes":10,"seconds":0.25,"rank":0,"time":1000.5,"source":"worker-resume"}
{"type":"stage","phase":"begin","stage":"resume","rank":0,"time":1002.0,"source":"worker-resume"}
)");
  const auto restore = find(t, "X", "restore step 2");
  ASSERT_EQ(restore.size(), 1u) << t.dump();
  EXPECT_EQ(restore[0]["ts"], 0.0);
  EXPECT_EQ(restore[0]["dur"], 500000.0) << "from the begin, not from end - seconds";
  EXPECT_TRUE(find(t, "X", "restore step ?").empty()) << "no span left open: " << t.dump();
  EXPECT_EQ(find(t, "i", "skip").size(), 1u);
}
