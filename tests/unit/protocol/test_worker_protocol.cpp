// The worker protocol (include/anchor/protocol/worker_protocol.hpp): parsing what a
// worker reports, the serialiser the built-in worker writes with, reading a
// growing events file, and the verdict, with a negative control per rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "anchor/error.hpp"
#include "anchor/protocol/worker_protocol.hpp"

namespace pp = anchor::protocol;

namespace {

const std::string kA(64, 'a'), kB(64, 'b'), kC(64, 'c');

std::string digests(const std::string& when, int step, const std::string& model, const std::string& opt) {
  return R"({"type":"digests","rank":0,"time":1.5,"when":")" + when + R"(","step":)" + std::to_string(step) +
         R"(,"components":{"model":")" + model + R"(","optimizer":")" + opt + R"(","rng":")" + kC + R"("}})";
}
std::string step(int s, const std::string& loss) {
  return R"({"type":"step","rank":0,"time":2,"step":)" + std::to_string(s) + R"(,"loss":)" + loss +
         R"(,"grad_norm":null,"lr":0.001,"tokens":16,"data_wait_s":0.001,"compute_s":0.01})";
}
std::string restore_end(int s) {
  return R"({"type":"checkpoint","rank":0,"time":3,"op":"restore","phase":"end","step":)" + std::to_string(s) +
         R"(,"dir":"/c/step-2","bytes":100,"seconds":0.5})";
}

pp::WorkerLog log_of(std::initializer_list<std::string> lines) {
  pp::WorkerLog w;
  for (const auto& l : lines) w.add(pp::parse_event(l));
  return w;
}

// A reference that saved step 2 and was killed in its save of step 4, and a resume that matches it.
pp::WorkerLog reference() {
  return log_of({digests("save", 2, kA, kB), step(3, "1.25"), step(4, "1.125"), digests("save", 4, kB, kA)});
}
pp::WorkerLog resumed(const std::string& restored_opt = kB, const std::string& loss4 = "1.125") {
  return log_of({restore_end(2), digests("restore", 2, kA, restored_opt), step(3, "1.25"), step(4, loss4),
                 digests("save", 4, kB, kA)});
}

std::string error_of(const std::string& line) {
  try {
    pp::parse_event(line);
  } catch (const anchor::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ProgramProtocol, ParsesEveryLineTheHelperWrites) {
  auto h = pp::parse_event(R"({"type":"hello","rank":1,"time":1.0,"protocol":1,"role":"reference","world_size":2,)"
                           R"("versions":{"torch":"2.15.0","cuda":null,"cudnn":91002,"nccl":null,"python":"3.11.2"},)"
                           R"("anchor_pilot":"0.1.0","parameters":321,"executable":"/usr/bin/python3","pid":42})");
  ASSERT_EQ(h.type, "hello");
  EXPECT_EQ(h.rank, 1);
  const auto& hello = std::get<pp::Hello>(h.body);
  EXPECT_EQ(hello.world_size, 2);
  EXPECT_EQ(hello.versions.cudnn, "91002");
  EXPECT_EQ(hello.versions.cuda, "");
  EXPECT_EQ(*hello.parameters, 321);
  auto s = std::get<pp::StepLine>(pp::parse_event(step(3, R"("inf")")).body);
  EXPECT_TRUE(s.loss.known);
  EXPECT_TRUE(std::isinf(s.loss.value));
  EXPECT_FALSE(s.grad_norm.known);
  EXPECT_EQ(*s.tokens, 16);
  auto k = std::get<pp::CheckpointLine>(
      pp::parse_event(R"({"type":"checkpoint","rank":0,"time":1,"op":"save","phase":"kill_window","step":4,)"
                      R"("dir":"/c/step-4","point":"after_file:model.safetensors"})")
          .body);
  EXPECT_EQ(k.phase, "kill_window");
  EXPECT_EQ(k.point, "after_file:model.safetensors");
  auto pl = std::get<pp::ProgramLine>(
      pp::parse_event(R"({"type":"program","rank":0,"time":1,"root":"/p","sources":["/p/train.py"],"executable":"/py",)"
                      R"("sys_path":["/p"],"distributions":[{"name":"torch","version":"2.15.0","dist_info":"/s/t"}]})")
          .body);
  ASSERT_EQ(pl.distributions.size(), 1u);
  EXPECT_EQ(pl.distributions[0].version, "2.15.0");
  // Unknown fields are a newer helper's: accepted.
  EXPECT_EQ(error_of(R"({"type":"eval","rank":0,"time":1,"step":2,"loss":0.5,"new_field":1})"), "");
}

TEST(ProgramProtocol, RefusesWhatTheHelperNeverWrites) {
  EXPECT_NE(error_of("not json").find("not a JSON line"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"gossip","rank":0,"time":1})").find("unknown event type \"gossip\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"step","rank":0,"time":1,"loss":1})").find("\"step\".step is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"step","rank":0,"time":1,"step":"3"})").find("expected an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"step","rank":-1,"time":1,"step":3})").find("rank is -1, not a rank"),
            std::string::npos);
  EXPECT_NE(error_of(digests("save", 2, "xyz", kB)).find("expected a SHA-256"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"type":"hello","rank":0,"time":1,"protocol":2,"role":"reference","world_size":1,"versions":{}})")
          .find("speaks protocol 2; this anchor speaks protocol 1"),
      std::string::npos);
  // Nesting deeper than anchor's limit is refused before nlohmann recurses into it.
  EXPECT_NE(error_of(std::string(100000, '[') + std::string(100000, ']')).find("not a JSON line"), std::string::npos);
}

TEST(ProgramProtocol, ReaderFollowsAGrowingFileAndNamesTheBadLine) {
  const std::string path = ::testing::TempDir() + "/events-" + std::to_string(::getpid()) + ".jsonl";
  std::filesystem::remove(path);
  pp::EventReader r(path);
  EXPECT_TRUE(r.poll().empty());  // not written yet: nothing, no error
  std::ofstream out(path);
  const std::string line = step(1, "2.5");
  out << line << "\n" << line.substr(0, 20) << std::flush;  // a line cut in the middle of its write
  auto got = r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(r.poll().empty());
  out << line.substr(20) << "\n\n"
      << "{oops\n"
      << std::flush;
  try {
    r.poll();
    FAIL() << "a bad line must be an error";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":4: not a JSON line"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(ProgramProtocol, TheResumedRunMatches) {
  auto v = pp::compare(reference(), resumed(), 2, 4, 0.0);
  EXPECT_TRUE(v.match()) << v.to_json().dump(2);
  EXPECT_EQ(v.mode, "bitwise");
  EXPECT_EQ(v.to_json()["verdict"], "match");
}

TEST(ProgramProtocol, AComponentNotRestoredIsNamed) {
  auto v = pp::compare(reference(), resumed(kA), 2, 4, 0.0);  // the optimizer came back different
  EXPECT_FALSE(v.match());
  ASSERT_FALSE(v.cause.empty());
  EXPECT_EQ(v.cause[0], "optimizer");
  EXPECT_NE(v.to_json().dump().find("component 'optimizer' differs"), std::string::npos);
}

TEST(ProgramProtocol, LossesAreComparedBitwiseOrWithinTheTolerance) {
  auto off = resumed(kB, "1.1250000000000002");  // one ulp
  auto v = pp::compare(reference(), off, 2, 4, 0.0);
  EXPECT_FALSE(v.match());
  EXPECT_EQ(v.cause[0], "loss");
  EXPECT_TRUE(pp::compare(reference(), off, 2, 4, 1e-9).match());
  EXPECT_FALSE(pp::compare(reference(), resumed(kB, "1.2"), 2, 4, 1e-9).match());
}

TEST(ProgramProtocol, ARestoreOfAnotherStepOrMissingStepsFail) {
  auto wrong = log_of({restore_end(4), digests("restore", 4, kB, kA)});
  auto v = pp::compare(reference(), wrong, 2, 4, 0.0);
  EXPECT_FALSE(v.match());
  EXPECT_EQ(v.cause[0], "checkpoint");
  auto short_run = log_of({restore_end(2), digests("restore", 2, kA, kB), step(3, "1.25"), digests("save", 4, kB, kA)});
  v = pp::compare(reference(), short_run, 2, 4, 0.0);
  EXPECT_FALSE(v.match());
  EXPECT_NE(v.to_json().dump().find("reports 1 steps after step 2, expected 2"), std::string::npos);
}

// Observed mode (the program's own save and load): every component the load did not bring back is named in
// the program's terms; a start from scratch is told where to look.
TEST(ProgramProtocol, ObservedModeNamesWhatTheProgramsLoadDidNotBringBack) {
  auto v = pp::compare(reference(), resumed(kA), 2, 4, 0.0, /*observed=*/true);
  ASSERT_FALSE(v.match());
  EXPECT_EQ(v.cause[0], "optimizer");
  EXPECT_NE(v.to_json().dump().find("the optimizer: after your load its state differs from your save of step 2"),
            std::string::npos)
      << v.to_json().dump(2);
  EXPECT_TRUE(pp::compare(reference(), resumed(), 2, 4, 0.0, true).match());  // the control
  auto scratch =
      log_of({step(1, "3.0"), step(2, "2.0"), step(3, "1.25"), step(4, "1.125"), digests("save", 4, kB, kA)});
  v = pp::compare(reference(), scratch, 2, 4, 0.0, true);
  EXPECT_EQ(v.cause, std::vector<std::string>{"checkpoint"});
  EXPECT_NE(v.to_json().dump().find("the resumed run started from scratch"), std::string::npos);
  EXPECT_EQ(pp::component_words("rng.torch"), "torch's CPU random generator");
  EXPECT_EQ(pp::component_words("ema"), "'ema'");
}

// A resume at another world size: the full state compared without each rank's own; the losses shown, not judged.
TEST(ProgramProtocol, AReshardedResumeComparesTheFullStateWithoutEachRanksOwn) {
  // The resumed run's rng differs (another rank's stream) and its losses too: neither fails a reshard.
  auto res = log_of({restore_end(2),
                     R"({"type":"digests","rank":0,"time":1.5,"when":"restore","step":2,"components":{"model":")" + kA +
                         R"(","optimizer":")" + kB + R"(","rng":")" + kA + R"("}})",
                     step(3, "1.5"), step(4, "1.375")});
  auto v = pp::compare_resharded(reference(), res, 2, 4, 2, 1);
  EXPECT_TRUE(v.match()) << v.to_json().dump(2);
  EXPECT_EQ(v.mode, "resharded");
  const auto text = v.to_json().dump();
  EXPECT_NE(text.find("2 components equal in full (each sharded tensor gathered), resharded from 2 to 1 ranks; not "
                      "compared: rng (each rank's own"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("losses 3: 1.5 (reference 1.25); 4: 1.375 (reference 1.125): not compared"), std::string::npos);
  // The controls: an optimizer not restored, a step missing, a loss that is not finite, another step restored.
  v = pp::compare_resharded(reference(), resumed(kA), 2, 4, 2, 1);
  EXPECT_EQ(v.cause, std::vector<std::string>{"optimizer"});
  EXPECT_NE(v.to_json().dump().find("the optimizer: after your load its state differs from your save of step 2"),
            std::string::npos);
  v = pp::compare_resharded(reference(), log_of({restore_end(2), digests("restore", 2, kA, kB), step(3, "1.5")}), 2, 4,
                            2, 1);
  EXPECT_EQ(v.cause, std::vector<std::string>{"steps"});
  EXPECT_NE(v.to_json().dump().find("reports 1 steps after step 2, expected 2"), std::string::npos);
  v = pp::compare_resharded(reference(),
                            log_of({restore_end(2), digests("restore", 2, kA, kB), step(3, "1.5"), step(4, "null")}), 2,
                            4, 2, 1);
  EXPECT_NE(v.to_json().dump().find("reports step 4 twice or without a finite loss"), std::string::npos);
  v = pp::compare_resharded(reference(), log_of({restore_end(1), digests("restore", 1, kA, kB)}), 2, 4, 2, 1);
  EXPECT_EQ(v.cause, std::vector<std::string>{"checkpoint"});
}

// A learning rate that differs before the loss does is the scheduler's, named even when the restored state
// (which the scheduler was not part of) is equal.
TEST(ProgramProtocol, ALearningRateThatDiffersNamesTheScheduler) {
  auto with_lr = [](int s, const std::string& loss, const std::string& lr) {
    std::string line = step(s, loss);
    return line.replace(line.find(R"("lr":0.001)"), 10, R"("lr":)" + lr);
  };
  auto res = log_of({restore_end(2), digests("restore", 2, kA, kB), with_lr(3, "1.25", "0.002"),
                     with_lr(4, "1.5", "0.002"), digests("save", 4, kB, kA)});
  for (const bool observed : {false, true}) {
    const auto v = pp::compare(reference(), res, 2, 4, 0.0, observed);
    EXPECT_EQ(v.cause, std::vector<std::string>{"scheduler"}) << v.to_json().dump(2);
    const auto text = v.to_json().dump();
    EXPECT_NE(text.find("\"lr at step 3\""), std::string::npos);
    EXPECT_EQ(text.find("\"lr at step 4\""), std::string::npos) << "the first one only";
    EXPECT_NE(text.find("the learning rate differs (reference 0.001, resumed 0.002): the scheduler did not come back"),
              std::string::npos)
        << text;
  }
  EXPECT_TRUE(pp::compare(reference(), resumed(), 2, 4, 0.0).match());  // the control: the same lr
}

// Where both runs give their input batches' digests, the first resumed step on other data is named: the cursor.
TEST(ProgramProtocol, ABatchThatDiffersNamesTheDataCursor) {
  auto with_batch = [](int s, const std::string& loss, const std::string& batch) {
    std::string line = step(s, loss);
    return line.substr(0, line.size() - 1) + R"(,"batch":")" + batch + R"("})";
  };
  const std::string b3(64, 'c'), b4(64, 'd');
  auto ref = log_of(
      {digests("save", 2, kA, kB), with_batch(3, "1.25", b3), with_batch(4, "1.125", b4), digests("save", 4, kB, kA)});
  auto same = log_of({restore_end(2), digests("restore", 2, kA, kB), with_batch(3, "1.25", b3),
                      with_batch(4, "1.125", b4), digests("save", 4, kB, kA)});
  EXPECT_TRUE(pp::compare(ref, same, 2, 4, 0.0).match());
  auto other = log_of({restore_end(2), digests("restore", 2, kA, kB), with_batch(3, "1.5", b4),
                       with_batch(4, "1.125", b3), digests("save", 4, kB, kA)});
  auto v = pp::compare(ref, other, 2, 4, 0.0);
  ASSERT_FALSE(v.match());
  EXPECT_EQ(v.cause[0], "data");
  const auto j = v.to_json().dump();
  EXPECT_NE(j.find("batch at step 3"), std::string::npos) << j;
  EXPECT_EQ(j.find("batch at step 4"), std::string::npos) << j;  // the first one only
  // A run that gives no batch digests is compared by its losses alone.
  EXPECT_EQ(pp::compare(ref, resumed(), 2, 4, 0.0).cause.size(), 0u);
  EXPECT_EQ(std::get<pp::StepLine>(pp::parse_event(with_batch(3, "1.0", b3)).body).batch, b3);
}

// The state restored equal, the RNG streams not where they were at the first resumed step's start: something
// drew from them in between (a DataLoader iterator made after the restore).
TEST(ProgramProtocol, AnRngDrawnFromAfterTheRestoreIsNamed) {
  auto with_rng = [](int s, const std::string& loss, const std::string& rng) {
    std::string line = step(s, loss);
    return line.substr(0, line.size() - 1) + R"(,"rng":")" + rng + R"("})";
  };
  const std::string r3(64, '3'), r4(64, '4'), drawn(64, 'e');
  auto ref = log_of(
      {digests("save", 2, kA, kB), with_rng(3, "1.25", r3), with_rng(4, "1.125", r4), digests("save", 4, kB, kA)});
  auto same = log_of({restore_end(2), digests("restore", 2, kA, kB), with_rng(3, "1.25", r3), with_rng(4, "1.125", r4),
                      digests("save", 4, kB, kA)});
  EXPECT_TRUE(pp::compare(ref, same, 2, 4, 0.0).match());
  auto drew = log_of({restore_end(2), digests("restore", 2, kA, kB), with_rng(3, "1.5", drawn),
                      with_rng(4, "1.0", drawn), digests("save", 4, kA, kA)});
  auto v = pp::compare(ref, drew, 2, 4, 0.0);
  ASSERT_FALSE(v.match());
  EXPECT_EQ(v.cause[0], "rng");
  EXPECT_NE(v.to_json().dump().find("something drew from them between the restore and this step"), std::string::npos);
  // A state restored wrongly explains the rest: no rng check then.
  auto wrong = log_of({restore_end(2), digests("restore", 2, kA, kA), with_rng(3, "1.5", drawn),
                       with_rng(4, "1.0", drawn), digests("save", 4, kA, kA)});
  v = pp::compare(ref, wrong, 2, 4, 0.0);
  EXPECT_EQ(v.cause[0], "optimizer");
  EXPECT_EQ(v.to_json().dump().find("rng at step"), std::string::npos);
}

TEST(ProgramProtocol, SpecSerialisesWhatTheHelperReads) {
  pp::Spec s;
  s.role = pp::Role::kResume;
  s.run_dir = "/r";
  s.checkpoint_dir = "/r/c";
  s.events = "/r/e.jsonl";
  s.save_at = {4};
  s.stop_at = 4;
  s.seed = 7;
  auto j = pp::to_json(s);
  EXPECT_EQ(j["protocol"], 1);
  EXPECT_EQ(j["role"], "resume");
  EXPECT_TRUE(j["restore"].is_null());
  EXPECT_TRUE(j["kill_in_save"].is_null());
  s.kill_in_save = 4;
  EXPECT_EQ(pp::to_json(s)["kill_in_save"], 4);
  EXPECT_FALSE(pp::to_json(s).contains("probe"));
  s.role = pp::Role::kProbe;
  s.probe = {{2, 16}};
  j = pp::to_json(s);
  EXPECT_EQ(j["role"], "probe");
  EXPECT_EQ(j["probe"], (nlohmann::json{{"micro_batch", 2}, {"seq_len", 16}}));
}

TEST(ProgramProtocol, HelloShapeAndStepMemory) {
  const std::string hello =
      R"({"type":"hello","rank":0,"time":1,"protocol":1,"role":"reference","world_size":1,"anchor_pilot":"0.1.0",)"
      R"("versions":{"torch":"2.5.0","cuda":null,"cudnn":null,"nccl":null,"python":"3.11"},"parameters":10,)"
      R"("shape":{"micro_batch":4,"seq_len":32,"grad_accum":1,"precision":"bf16","n_layer":2,"n_embd":null,)"
      R"("flops_per_token":null,"probe":true}})";
  auto w = log_of(
      {hello,
       R"({"type":"step_memory","rank":0,"time":2,"step":2,"device":"cpu","peak_bytes":1000,)"
       R"("peak_source":"VmHWM","baseline_bytes":400,"state":{"parameters":40,"gradients":40,"optimizer":80}})"});
  ASSERT_TRUE(w.hello && w.hello->shape);
  EXPECT_EQ(w.hello->shape->micro_batch, 4);
  EXPECT_EQ(w.hello->shape->precision, "bf16");
  EXPECT_EQ(w.hello->shape->n_layer, 2);
  EXPECT_FALSE(w.hello->shape->n_embd);
  EXPECT_TRUE(w.hello->shape->probe);
  ASSERT_TRUE(w.step_memory);
  EXPECT_EQ(w.step_memory->peak_bytes, 1000);
  EXPECT_EQ(w.step_memory->optimizer_bytes, 80);
  // A hello without a shape (the program did not call anchor_pilot.shape) is fine.
  auto bare = hello.substr(0, hello.find(R"(,"shape")")) + "}";
  EXPECT_FALSE(pp::parse_event(bare).raw.contains("shape"));
  // Negative controls: a shape that cannot be planned is a malformed line.
  auto with = [&](const std::string& from, const std::string& to) {
    std::string h = hello;
    h.replace(h.find(from), from.size(), to);
    return h;
  };
  EXPECT_THROW(pp::parse_event(with(R"("micro_batch":4)", R"("micro_batch":0)")), anchor::Error);
  EXPECT_THROW(pp::parse_event(with(R"("seq_len":32)", R"("seq_len":2147483648)")), anchor::Error);
  // The error line's kind, and a negative byte count refused.
  auto err = log_of({R"({"type":"error","rank":0,"time":3,"message":"RestoreError: x","kind":"RestoreError"})"});
  ASSERT_EQ(err.errors.size(), 1u);
  EXPECT_EQ(err.errors[0].kind, "RestoreError");
  EXPECT_THROW(pp::parse_event(
                   R"({"type":"step_memory","rank":0,"time":2,"step":2,"device":"cpu","peak_bytes":-1,)"
                   R"("peak_source":"x","baseline_bytes":null,"state":{"parameters":1,"gradients":1,"optimizer":0}})"),
               anchor::Error);
  EXPECT_THROW(pp::parse_event(with(R"("precision":"bf16")", R"("precision":"fp8")")), anchor::Error);
  EXPECT_THROW(pp::parse_event(with(R"("probe":true)", R"("probe":1)")), anchor::Error);
  EXPECT_THROW(pp::parse_event(R"({"type":"step_memory","rank":0,"time":2,"step":2,"device":"cpu","peak_bytes":1,)"
                               R"("peak_source":"x","baseline_bytes":null,"state":{"parameters":1}})"),
               anchor::Error);
}

TEST(ProgramProtocol, AStepReportedTwiceIsNotASecondStep) {
  auto twice = log_of(
      {restore_end(2), digests("restore", 2, kA, kB), step(3, "1.25"), step(3, "1.25"), digests("save", 4, kB, kA)});
  auto v = pp::compare(reference(), twice, 2, 4, 0.0);
  EXPECT_FALSE(v.match());
  EXPECT_NE(v.to_json().dump().find("reports step 3 twice"), std::string::npos);
}

TEST(ProgramProtocol, WithinATolerancetheLastStateIsReportedNotFailed) {
  auto drifted = log_of(
      {restore_end(2), digests("restore", 2, kA, kB), step(3, "1.25"), step(4, "1.125"), digests("save", 4, kC, kA)});
  EXPECT_FALSE(pp::compare(reference(), drifted, 2, 4, 0.0).match());  // bitwise: the model differs
  auto v = pp::compare(reference(), drifted, 2, 4, 1e-6);
  EXPECT_TRUE(v.match()) << v.to_json().dump(2);
  EXPECT_NE(v.to_json().dump().find("tolerance mode"), std::string::npos);
  // The restored state is compared exactly in either mode.
  EXPECT_FALSE(pp::compare(reference(), resumed(kA), 2, 4, 1e-6).match());
}

TEST(ProgramProtocol, ARankThatIsNoRankIsRefused) {
  EXPECT_NE(error_of(R"({"type":"eval","rank":4294967296,"time":1,"step":2,"loss":0.5})").find("not a rank"),
            std::string::npos);
}

// The serialiser the built-in worker writes with is the parser's inverse, line
// type by line type: what to_json writes, parse_event reads back as it was.
TEST(WorkerProtocol, EveryLineSerialisesToWhatItParsesBackAs) {
  pp::Hello h;
  h.role = "resume";
  h.world_size = 2;
  h.versions = {"2.15.0", "13.0", "91000", "", ""};
  h.anchor = "0.1.0+abc";
  h.executable = "/bin/anchor-torch";
  h.pid = 42;
  pp::StepLine s;
  s.step = 3;
  s.loss = {true, 2.5};
  s.grad_norm = {true, std::numeric_limits<double>::infinity()};
  s.tokens = 16;
  s.compute_s = 0.25;
  s.stop_at = 4;
  s.rng_streams = {{"numpy", kA}, {"torch", kB}};
  pp::DigestsLine d;
  d.step = 2;
  d.when = "restore";
  d.components = {{"model", kA}, {"optimizer", kB}, {"rng", kC}};
  pp::CheckpointLine c;
  c.op = "save";
  c.phase = "kill_window";
  c.step = 4;
  c.dir = "/c/step-00000004";
  c.point = "after_file:model.safetensors";
  pp::CheckpointLine skip;
  skip.op = "restore";
  skip.phase = "skip";
  skip.dir = "/c/step-00000004.tmp-1";
  skip.problems = {"torn"};
  pp::StageLine begin{"train", "begin", "", std::nullopt}, end{"train", "end", "passed", 0.5};
  pp::ErrorLine err{"step 3: non-finite loss", "", "lower the lr"};
  pp::StepMemoryLine sm;
  sm.step = 2;
  sm.device = "cpu";
  sm.peak_source = "rss";
  sm.peak_bytes = 100;
  sm.parameters_bytes = 8;
  pp::MemoryLine mem;
  mem.stage = "restore";
  mem.device = "cuda:0";
  mem.allocated_bytes = 10;
  mem.reserved_bytes = 20;
  mem.max_allocated_bytes = 15;
  mem.total_bytes = 1000;
  mem.rss_bytes = 5;
  pp::MemoryLine window = mem;  // the helper's stage line: its window's peaks
  window.window = "Pilot.restore()";
  window.peak_rss_bytes = 7;
  window.peak_allocated_bytes = 16;
  window.peak_reserved_bytes = 24;
  window.free_bytes = 900;
  pp::ProfileLine prof;
  prof.step = 8;
  prof.seconds = 0.25;
  prof.comm_s = 0.01;
  prof.matmul_flops = 2.5e10;
  prof.events = 1234;
  prof.profiler = "torch.profiler";
  prof.file = "profile.json";
  pp::ProfileLine prof_failed;
  prof_failed.step = 8;
  prof_failed.error = "RuntimeError: no profiler";
  pp::ProgramLine prog;
  prog.root = "/p";
  prog.executable = "/usr/bin/python3";
  prog.sources = {"/p/train.py"};
  prog.sys_path = {"/p"};
  prog.distributions = {{"torch", "2.15.0", "/site/torch-2.15.0.dist-info"}};
  pp::ProgramLine no_dists = prog;
  no_dists.distributions.clear();
  no_dists.distributions_error = "ImportError: no metadata";
  for (const pp::Body& b : std::vector<pp::Body>{h, s, pp::EvalLine{2, {true, 1.5}, "", std::nullopt},
                                                 pp::EvalLine{4, {true, 2.5}, "after_restore", 0.5}, d, c, skip, begin,
                                                 end, err, sm, mem, window, prof, prof_failed, prog, no_dists}) {
    const auto e = pp::line(b, 1);
    const nlohmann::json j = pp::to_json(e);
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["type"], pp::type_of(b));
    const auto back = pp::parse_event(j.dump());
    EXPECT_EQ(back.type, pp::type_of(b));
    EXPECT_EQ(back.rank, 1);
    EXPECT_GT(back.time, 1.7e9) << "Unix seconds, now";
    EXPECT_EQ(back.body.index(), b.index());
    EXPECT_EQ(pp::to_json(back), j) << "the line read back writes the same line";
  }
  // What the parser gives back, field by field, for the kinds the supervisor acts on.
  const auto step_back = std::get<pp::StepLine>(pp::parse_event(pp::to_json(pp::line(s)).dump()).body);
  EXPECT_EQ(step_back.stop_at, 4);
  EXPECT_TRUE(std::isinf(step_back.grad_norm.value)) << "\"inf\" on the wire";
  EXPECT_FALSE(step_back.lr.known) << "an unknown figure is null";
  EXPECT_FALSE(step_back.data_wait_s.has_value());
  EXPECT_EQ(step_back.rng_streams, s.rng_streams);
  EXPECT_NE(error_of(R"({"type":"step","rank":0,"time":1,"step":1,"loss":1,"grad_norm":null,"lr":null,)"
                     R"("rng_streams":{"torch":"x"}})")
                .find("\"step\".rng_streams.torch is \"x\", expected a SHA-256"),
            std::string::npos);
  const auto hello_back = std::get<pp::Hello>(pp::parse_event(pp::to_json(pp::line(h)).dump()).body);
  EXPECT_EQ(hello_back.anchor, "0.1.0+abc");
  EXPECT_EQ(hello_back.versions.nccl, "") << "null: not loaded";
  const auto end_back = std::get<pp::StageLine>(pp::parse_event(pp::to_json(pp::line(end)).dump()).body);
  EXPECT_EQ(end_back.status, "passed");
  EXPECT_EQ(end_back.seconds, 0.5);
  EXPECT_EQ(std::get<pp::ErrorLine>(pp::parse_event(pp::to_json(pp::line(err)).dump()).body).hint, "lower the lr");
  // Negative controls: a stage line must say which stage and begin or end.
  EXPECT_NE(error_of(R"({"type":"stage","rank":0,"time":1,"stage":"train","phase":"middle"})").find("begin or end"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"stage","rank":0,"time":1,"stage":"","phase":"begin"})").find("empty"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"stage","rank":0,"time":1,"phase":"begin"})"), "");
  // The helper's profile line names a file in the run directory, nothing else; an eval's `when` is one of two.
  EXPECT_NE(error_of(R"({"type":"profile","rank":0,"time":1,"step":2,"file":"../report.json"})")
                .find("expected a file name in the run directory"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"eval","rank":0,"time":1,"step":2,"loss":1,"when":"later"})")
                .find("expected before_save or after_restore"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"memory","rank":0,"time":1,"stage":"load","device":"cpu","peak_rss_bytes":-1})")
                .find("negative"),
            std::string::npos);
}

// The spec's parser, the C++ side of what the helper checks (spec.py): what
// to_json writes reads back as it was, a path's exact bytes included, and
// every problem is named at once.
TEST(WorkerProtocol, ASpecReadsBackAsWrittenAndEveryProblemIsNamed) {
  pp::Spec s;
  s.role = pp::Role::kReference;
  s.run_dir = "/r/\xff\xfe";  // not UTF-8: its bytes travel as run_dir_hex
  s.checkpoint_dir = "/r/c";
  s.events = pp::kEventsOnStdout;
  s.save_at = {2, 4};
  s.stop_at = 4;
  s.kill_in_save = 4;
  s.seed = 1234;
  s.start_latest = true;
  const nlohmann::json j = pp::to_json(s);
  EXPECT_EQ(j["run_dir_hex"], "2f722ffffe");
  EXPECT_EQ(j["start_from"], "latest");
  const pp::Spec back = pp::spec_from_json(nlohmann::json::parse(j.dump()), "spec.json");
  EXPECT_EQ(back.run_dir, s.run_dir) << "the exact bytes";
  EXPECT_EQ((std::tuple(back.role, back.checkpoint_dir, back.events, back.save_at, back.stop_at, back.kill_in_save,
                        back.seed, back.deterministic, back.start_latest, back.restore.has_value())),
            (std::tuple(s.role, s.checkpoint_dir, s.events, s.save_at, s.stop_at, s.kill_in_save, s.seed,
                        s.deterministic, true, false)));
  s.start_latest = false;
  EXPECT_FALSE(pp::to_json(s).contains("start_from")) << "a program's spec is unchanged";
  EXPECT_FALSE(pp::to_json(s).contains("reshard"));
  s.reshard = {{2, 1}};
  EXPECT_EQ(pp::to_json(s)["reshard"], (nlohmann::json{{"from", 2}, {"to", 1}}));
  EXPECT_EQ(pp::spec_from_json(pp::to_json(s), "spec.json").reshard, s.reshard);
  EXPECT_FALSE(pp::to_json(s).contains("profile_step"));
  s.profile_step = 4;
  EXPECT_EQ(pp::spec_from_json(pp::to_json(s), "spec.json").profile_step, 4);
  {
    pp::Spec probe = s;
    probe.role = pp::Role::kProbe;
    probe.probe = {{1, 32}};
    probe.probe_more = {{4, 16, "probe-2.spec.json"}};
    EXPECT_EQ(pp::spec_from_json(pp::to_json(probe), "spec.json").probe_more, probe.probe_more);
    nlohmann::json not_a_name = pp::to_json(probe);
    not_a_name["probe_more"][0]["spec"] = "../x.json";
    EXPECT_THROW(pp::spec_from_json(not_a_name, "spec.json"), anchor::Error) << "a file name, not a path";
  }

  auto problems = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json bad = j;
    change(bad);
    try {
      pp::spec_from_json(bad, "spec.json");
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kRuntime);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(problems([](nlohmann::json&) {}), "") << "the control: the spec as written";
  EXPECT_NE(problems([](nlohmann::json& d) {
              d["reshard"] = {{"from", 2}, {"to", 0}};
            }).find(R"('reshard' is {"from":2,"to":0}, expected an object {"from": int >= 1, "to": int >= 1})"),
            std::string::npos);
  const std::string many = problems([](nlohmann::json& d) {
    d.erase("seed");
    d["extra"] = 1;
    d["stop_at"] = 0;
    d["role"] = "teacher";
    d["digests_every"] = -1;
  });
  for (const char* said : {"5 problems", "missing key 'seed'", "unknown key 'extra'", "'stop_at' is 0",
                           "'role' is \"teacher\"", "'digests_every' is -1"})
    EXPECT_NE(many.find(said), std::string::npos) << said << " in: " << many;
  EXPECT_NE(problems([](nlohmann::json& d) { d["kill_in_save"] = 3; }).find("does not hold it"), std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d["profile_step"] = 0; }).find("'profile_step' is 0"), std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d["restore"] = "/r/c/step-00000002"; }).find("only a resume restores"),
            std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) {
              d["probe"] = {{"micro_batch", 1}, {"seq_len", 8}};
            }).find("'probe'"),
            std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d["protocol"] = 2; }).find("'protocol' is 2"), std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d["start_from"] = "yesterday"; }).find("start_from"), std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) {
              d["run_dir_hex"] = "zz";
            }).find("'run_dir_hex' is \"zz\", expected a path's bytes"),
            std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d["run_dir_hex"] = ""; }).find("'run_dir_hex'"), std::string::npos)
      << "an empty path is no path";
  EXPECT_NE(problems([](nlohmann::json& d) { d["restore_hex"] = "2f"; }).find("'restore' is null"), std::string::npos);
  EXPECT_NE(problems([](nlohmann::json& d) { d = nlohmann::json::array(); }).find("not a JSON object"),
            std::string::npos);
}

// A spec file's relative paths are its directory's, as the helper takes them.
TEST(WorkerProtocol, ASpecFilesRelativePathsAreItsDirectorys) {
  const auto dir = std::filesystem::temp_directory_path() / ("anchor-spec-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  pp::Spec s;
  s.role = pp::Role::kResume;
  s.run_dir = "run";
  s.checkpoint_dir = "/abs/ck";
  s.events = pp::kEventsOnStdout;
  s.stop_at = 4;
  std::ofstream(dir / "spec.json") << pp::to_json(s).dump();
  const pp::Spec back = pp::read_spec((dir / "spec.json").string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(back.run_dir, (dir / "run").string());
  EXPECT_EQ(back.checkpoint_dir, "/abs/ck") << "an absolute path stands";
  EXPECT_EQ(back.events, "-") << "the built-in worker's stdout is no path";
}
