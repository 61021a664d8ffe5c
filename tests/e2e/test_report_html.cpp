// A real pilot's report.html in a real browser (Debian's chromium, headless),
// and its trace.json: every stage of every process, signed with the report.
// tests/support/html_check.py loads the page and reports the console, the
// charts in the DOM Chromium built and the pixels of each series' colour in
// its screenshot; each claim has a negative control on a spoiled copy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/report/dsse.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::read_json;
using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

json browse(const std::string& page, const std::string& workdir) {
  anchor::proc::SpawnOptions o;
  auto r =
      anchor::proc::run_capture({"/usr/bin/python3", source_path("tests/support/html_check.py"), page, workdir}, o);
  EXPECT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

json chart(const json& seen, const std::string& name) {
  for (const auto& c : seen["charts"])
    if (c["name"] == name) return c;
  return json();
}

class ReportHtml : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(std::filesystem::exists("/usr/bin/chromium"))
        << "report.html is checked in Debian's chromium: scripts/install-deps.sh --test installs it";
    dir_ = new TempDir("report-html");
    auto r = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", dir_->str("run"), "-q"});
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string run(const std::string& f) { return dir_->str("run/" + f); }
  static TempDir* dir_;
};
TempDir* ReportHtml::dir_ = nullptr;

TEST_F(ReportHtml, LoadsInChromiumWithoutAConsoleMessageAndDrawsEveryChart) {
  const json seen = browse(run("report.html"), dir_->str("browse"));
  EXPECT_EQ(seen["screenshot_status"], 0);
  EXPECT_TRUE(seen["console"].empty()) << seen["console"].dump(2);
  // Loss, grad norm and lr: worker A and worker B, one line each, a dot per step (A 4, B 2).
  for (const char* name : {"loss", "grad_norm", "lr"}) {
    const json c = chart(seen, name);
    ASSERT_TRUE(c.is_object()) << name << ": " << seen.dump();
    EXPECT_EQ(c["polylines"], 2) << name;
    EXPECT_EQ(c["circles"], 6) << name;
  }
  EXPECT_GE(chart(seen, "step_time")["rects"].get<int>(), 4 * 3) << "data wait, compute, comm for each of A's 4 steps";
  EXPECT_GE(chart(seen, "memory")["rects"].get<int>(), 5) << "load, train, eval, checkpoint_save, restore";
  EXPECT_GE(chart(seen, "timeline")["rects"].get<int>(), 10) << "the stages of worker A, B and the supervisor";
  // Drawn, not only present: the pixels of worker A's blue, B's red (colours only the series use)
  // and the memory bars' violet.
  EXPECT_GT(seen["pixels"]["worker_a"].get<int>(), 100) << seen["pixels"].dump();
  EXPECT_GT(seen["pixels"]["worker_b"].get<int>(), 20) << seen["pixels"].dump();
  EXPECT_GT(seen["pixels"]["memory"].get<int>(), 1000) << seen["pixels"].dump();
}

TEST_F(ReportHtml, NegativeControlsAFetchIsAConsoleMessageAndUndrawnSeriesHaveNoPixels) {
  std::string page = anchor::fs::read_file(run("report.html"));
  // A page that tries to fetch: its own Content-Security-Policy refuses, and the console says so.
  std::string fetching = page;
  fetching.replace(fetching.find("<body>"), 6, "<body><img src=\"https://example.invalid/x.png\">");
  anchor::fs::atomic_write_file(dir_->str("fetching.html"), fetching);
  const json a = browse(dir_->str("fetching.html"), dir_->str("browse-fetching"));
  EXPECT_FALSE(a["console"].empty()) << "the check must see a console message when there is one";
  // The series' lines and dots renamed so the browser draws them not (the charts, their axes and
  // the other bars stay): none of the workers' colours is painted, the memory bars still are.
  std::string undrawn = page;
  for (const std::string tag : {"<polyline", "<circle"})
    for (std::size_t p; (p = undrawn.find(tag)) != std::string::npos;)
      undrawn.replace(p, tag.size(), "<x-" + tag.substr(1));
  anchor::fs::atomic_write_file(dir_->str("undrawn.html"), undrawn);
  const json b = browse(dir_->str("undrawn.html"), dir_->str("browse-undrawn"));
  EXPECT_EQ(chart(b, "loss")["polylines"], 0) << b.dump();
  EXPECT_EQ(b["pixels"]["worker_a"], 0) << b.dump();
  EXPECT_EQ(b["pixels"]["worker_b"], 0) << b.dump();
  EXPECT_GT(b["pixels"]["memory"].get<int>(), 1000) << b.dump();
}

// Worker B's last resumed step runs under LibTorch's profiler: profile.json
// is a Chrome trace of its operators, linked from both reports, and the
// step's numbers still equal worker A's (the verdict is bitwise). Kineto's where LibTorch has it (PyPI's 2.x: an object
// with traceEvents), anchor's operator recorder's otherwise (Debian's 1.13: an array).
TEST_F(ReportHtml, ProfileJsonIsLibTorchsTraceOfOneStepLinkedFromTheReports) {
  const json profile = read_json(run("profile.json"));
  const json manifest = read_json(run("manifest.json"));
  const bool kineto = manifest["dependencies"]["libtorch"].get<std::string>().rfind("1.", 0) != 0;
  ASSERT_EQ(profile.is_object(), kineto) << "Kineto on LibTorch 2.x, the operator recorder on 1.13";
  const json& events = kineto ? profile["traceEvents"] : profile;
  ASSERT_TRUE(events.is_array());
  std::size_t aten = 0, complete = 0;
  bool backward = false;
  for (const auto& e : events) {
    const bool span = e.value("ph", "") == "X" && e["ts"].is_number() && e["dur"].is_number();
    complete += span;
    const std::string name = e.value("name", "");
    aten += span && name.rfind("aten::", 0) == 0;
    backward |= span && name.find("Backward") != std::string::npos;
  }
  if (!kineto) {
    EXPECT_EQ(complete, events.size()) << "every event a complete span with a time and a length";
  }
  EXPECT_GT(aten, 100u) << "a training step of the built-in GPT runs hundreds of operators";
  EXPECT_TRUE(backward) << "the step's backward pass is in it";
  const json report = read_json(run("report.json"));
  json fig;
  for (const auto& s : report["stages"])
    if (s["stage"] == "resume") fig = s["figures"]["profile"];
  ASSERT_TRUE(fig.is_object()) << report["stages"].dump();
  EXPECT_EQ(fig["file"], "profile.json");
  const auto& cfg = report["config"];
  EXPECT_EQ(fig["step"], cfg["pilot"]["steps_before_save"].get<int>() + cfg["pilot"]["steps_after_resume"].get<int>())
      << "worker B's last step, counted from 1";
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  EXPECT_EQ(fig["events"], complete);
  EXPECT_NE(fig["profiler"].get<std::string>().find(kineto ? "Kineto profiler (operators, CPU)" : "operator recorder"),
            std::string::npos)
      << fig.dump();
  EXPECT_EQ(fig.contains("kineto"), !kineto) << "why there is no Kineto profile: " << fig.dump();
  EXPECT_EQ(fig["micro_batch"], report["config"]["train"]["micro_batch"]);
  EXPECT_NE(anchor::fs::read_file(run("report.html")).find("<a href=\"profile.json\">"), std::string::npos);
  EXPECT_NE(anchor::fs::read_file(run("report.md")).find("| profile of a step | profile.json: "), std::string::npos);
}

TEST_F(ReportHtml, TraceJsonHasEveryStageOfEveryProcessAndBothFilesAreSigned) {
  const json report = read_json(run("report.json"));
  const json trace = read_json(run("trace.json"));
  std::set<std::string> processes;
  std::multiset<std::string> spans;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X" && e["cat"] == "stage") spans.insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"supervisor", "worker A (reference)", "worker B (resume)"}));
  // Every stage of the report, once; `kill` twice: worker A's, cut short by the SIGKILL, and the supervisor's.
  for (const auto& s : report["stages"]) {
    const std::string name = s["stage"];
    EXPECT_EQ(spans.count(name), name == "kill" ? 2u : 1u) << name;
  }
  bool sigkill = false;
  for (const auto& e : trace["traceEvents"]) sigkill |= e["ph"] == "i" && e["name"] == "sigkill_sent";
  EXPECT_TRUE(sigkill);

  std::set<std::string> subjects;
  const json statement =
      json::parse(*anchor::report::base64_decode(read_json(run("report.intoto.json"))["payload"].get<std::string>()));
  for (const auto& s : statement["subject"]) subjects.insert(s["name"].get<std::string>());
  EXPECT_TRUE(subjects.count("report.html") && subjects.count("trace.json") && subjects.count("profile.json"))
      << statement["subject"].dump();
  // A page changed after signing fails verify, named (control: the untouched run verifies).
  auto ok = run_anchor({"verify", run("")});
  EXPECT_EQ(ok.status, 0) << ok.output;
  TempDir copy("report-html-copy");
  std::filesystem::copy(run(""), copy.str("run"), std::filesystem::copy_options::recursive);
  {
    std::ofstream f(copy.str("run/report.html"), std::ios::app);
    f << "<p>added after signing</p>";
  }
  auto bad = run_anchor({"verify", copy.str("run")});
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("report.html"), std::string::npos) << bad.output;
}

}  // namespace
