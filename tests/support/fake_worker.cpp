// A stand-in for `anchor-torch __worker` that speaks the worker protocol
// without LibTorch (include/anchor/protocol/), so the supervisor's driver tests
// (tests/unit/pilot/test_supervisor.cpp) run the real run_supervisor, its
// process handling, kill, report and JUnit file in milliseconds. It trains
// nothing: the figures it reports are made up, consistent with one another
// (worker B's steps and digests equal worker A's), and its checkpoint is a
// directory name. Real workers are the e2e tests' business.
//
// What it does besides is scripted by ANCHOR_FAKE_WORKER, a comma-separated
// list of what to do at the begin of a stage of worker A or B:
//   exit@A.train=2      exit with status 2
//   crash@B.restore     raise SIGSEGV
//   error@A.eval        report an error line ("the fake failed in eval"), exit 1
//   signal@B.resume=INT send SIGINT (or TERM) to the supervisor, then wait to be stopped
//   diverge             worker B's final state differs from worker A's (a resume mismatch)
//   no_kill_window      worker A ends (status 0) after its results instead of waiting to be killed
// Worker A's stages: pin load train eval checkpoint_save reference kill;
// worker B's: restore eval_after_restore resume memory_probe.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/error.hpp"
#include "anchor/protocol/events.hpp"
#include "anchor/protocol/work_files.hpp"
#include "anchor/protocol/worker_protocol.hpp"
#include "anchor/protocol/worker_result.hpp"
#include "support/made_up_records.hpp"

namespace {

namespace protocol = anchor::protocol;
using anchor::protocol::WorkerResult;

struct Script {
  std::vector<std::string> items;
  bool has(const std::string& item) const {
    for (const auto& i : items)
      if (i == item) return true;
    return false;
  }
  // The value of "what@who.stage=value" ("" without one), or nullptr when absent.
  const std::string* at(const std::string& what, const std::string& who, const std::string& stage,
                        std::string& value) const {
    const std::string key = what + "@" + who + "." + stage;
    for (const auto& i : items) {
      if (i == key) {
        value.clear();
        return &i;
      }
      if (i.rfind(key + "=", 0) == 0) {
        value = i.substr(key.size() + 1);
        return &i;
      }
    }
    return nullptr;
  }
};

Script read_script() {
  Script s;
  const char* env = std::getenv("ANCHOR_FAKE_WORKER");
  std::string text = env ? env : "";
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) s.items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return s;
}

const std::string kOther(64, 'e');  // worker B's model when told to diverge

anchor::train::StepRecord step(std::int64_t s) {
  return anchor::test::made_up_step(s, 5.5 - 0.01 * static_cast<double>(s));
}

// One stage: its begin line, then what the script says for it, then the work, then its end.
class Worker {
 public:
  Worker(Script script, std::string who) : script_(std::move(script)), who_(std::move(who)) {}

  // work() returns the stage's figures, as the built-in worker reports them
  // where the report reads them (the save's and the restore's bytes and seconds).
  template <typename F>
  void stage(const std::string& name, WorkerResult& out, F&& work) {
    protocol::StageTimer t(name);
    scripted(name);
    out.stages.push_back(t.end(work()));
  }

  void scripted(const std::string& name) const {
    std::string value;
    if (script_.at("exit", who_, name, value)) {
      std::fflush(nullptr);
      std::_Exit(std::atoi(value.c_str()));
    }
    if (script_.at("crash", who_, name, value)) {
      std::fflush(nullptr);
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
    }
    if (script_.at("error", who_, name, value)) {
      protocol::emit(protocol::ErrorLine{"the fake failed in " + name, "", "it was told to"});
      std::fflush(nullptr);
      std::_Exit(1);
    }
    if (script_.at("signal", who_, name, value)) {
      ::kill(::getppid(), value == "TERM" ? SIGTERM : SIGINT);
      for (;;) ::pause();  // the supervisor stops its workers (SIGKILL)
    }
  }

 private:
  Script script_;
  std::string who_;
};

void write_result(const std::string& run_dir, const std::string& role, const WorkerResult& r) {
  anchor::fs::atomic_write_file(protocol::work::result(run_dir, role), r.to_json().dump(2));
}

void steps(WorkerResult& out, std::vector<anchor::train::StepRecord>& into, std::int64_t from, std::int64_t to,
           std::int64_t stop_at) {
  for (std::int64_t s = from; s < to; ++s) {
    into.push_back(step(s));
    protocol::StepLine line;
    line.step = s + 1;
    line.loss = {true, into.back().loss};
    line.grad_norm = {true, 1.5};
    line.lr = {true, 1e-3};
    line.tokens = 256;
    line.stop_at = stop_at;
    protocol::emit(line);
  }
  (void)out;
}

int reference(const protocol::Spec& spec, const Script& script) {
  Worker w(script, "A");
  WorkerResult out;
  out.role = "reference";
  out.pid = ::getpid();
  out.start = {{"from", "init"}};
  const std::int64_t k = spec.save_at.empty() ? 2 : spec.save_at.front();
  const nlohmann::json none = nlohmann::json::object();
  w.stage("pin", out, [&] { return none; });
  w.stage("load", out, [&] {
    out.model = {1000, 2, 2, 64, 256, 32, 6000.0, "builtin", "6N + attention", "manual"};
    return none;
  });
  w.stage("train", out, [&] {
    steps(out, out.train_steps, 0, k, spec.stop_at);
    return none;
  });
  out.step_memory.tensors.allocated_bytes = 500;
  out.step_memory.tensors.peak_allocated_bytes = 900;
  out.step_memory.tensors.source = "counting_allocator";
  out.step_memory.process = {1 << 20, 2 << 20};
  out.state_bytes = {4000, 4000, 8000};
  out.matmul_flops = 1e10;
  w.stage("eval", out, [&] {
    out.eval_loss = 5.48;
    return nlohmann::json{{"loss", 5.48}};
  });
  w.stage("checkpoint_save", out, [&] {
    out.saved_step = k;
    out.saved_state = anchor::test::made_up_digest(k);
    return nlohmann::json{{"dir", spec.checkpoint_dir + "/step-" + std::to_string(k)},
                          {"bytes", 1000},
                          {"seconds", 0.001},
                          {"gb_per_s", 0.001}};
  });
  w.stage("reference", out, [&] {
    steps(out, out.reference_steps, k, spec.stop_at, spec.stop_at);
    return none;
  });
  out.final_state = anchor::test::made_up_digest(spec.stop_at);
  write_result(spec.run_dir, "reference", out);
  if (script.has("no_kill_window")) return 0;
  protocol::emit(protocol::StageLine{"kill", "begin", "", std::nullopt});
  w.scripted("kill");
  protocol::CheckpointLine window;
  window.op = "save";
  window.phase = "kill_window";
  window.step = spec.stop_at;
  window.dir = spec.checkpoint_dir + "/step-" + std::to_string(spec.stop_at);
  window.point = "after_file:model.safetensors";
  protocol::emit(window);
  for (;;) ::pause();  // until the supervisor's SIGKILL
}

int resume(const protocol::Spec& spec, const Script& script) {
  Worker w(script, "B");
  WorkerResult out;
  out.role = "resume";
  out.pid = ::getpid();
  // R, the steps after the restore: the run's config (the supervisor wrote it).
  const auto config = nlohmann::json::parse(anchor::fs::read_file(spec.run_dir + "/config.json"));
  const std::int64_t r = config["config"]["pilot"]["steps_after_resume"].get<std::int64_t>();
  const std::int64_t k = spec.stop_at - r;
  w.stage("restore", out, [&] {
    out.restored_step = k;
    out.restored_dir = spec.checkpoint_dir + "/step-" + std::to_string(k);
    out.restored_state = anchor::test::made_up_digest(k);
    out.rng_restore = nlohmann::json::object();
    return nlohmann::json{{"step", k}, {"dir", out.restored_dir}, {"bytes", 1000}, {"seconds", 0.001}};
  });
  w.stage("eval_after_restore", out, [&] {
    out.eval_loss = 5.48;
    return nlohmann::json{{"loss", 5.48}};
  });
  w.stage("resume", out, [&] {
    steps(out, out.resume_steps, k, spec.stop_at, spec.stop_at);
    return nlohmann::json{{"steps", spec.stop_at - k}};
  });
  out.final_state = anchor::test::made_up_digest(spec.stop_at, script.has("diverge") ? kOther : anchor::test::kDigestA);
  write_result(spec.run_dir, "resume", out);

  WorkerResult probe;
  probe.role = "probe";
  probe.pid = ::getpid();
  w.stage("memory_probe", probe, [&] {
    for (std::int64_t mb : {1, 2})
      probe.memory_points.push_back(
          protocol::MemoryPoint{mb, 32, 900 * mb, 1000 * mb, {4000, 4000, 8000}, "probe", std::nullopt});
    return nlohmann::json{{"points", probe.memory_points.size()}};
  });
  write_result(spec.run_dir, "probe", probe);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool is_worker = false;
  for (int i = 1; i < argc; ++i) is_worker = is_worker || std::string(argv[i]) == "__worker";
  if (!is_worker) {
    std::fprintf(stderr, "fake_worker: run by the supervisor as `fake_worker ... __worker`\n");
    return 2;
  }
  try {
    if (const char* r = std::getenv(protocol::kReleaseEnv); r && std::string(r) == "stdin") {
      std::string line;
      if (!std::getline(std::cin, line) || line != "go") return 1;  // not released: the pilot ended first
    }
    const char* spec_path = std::getenv(protocol::kSpecEnv);
    if (!spec_path) throw anchor::Error(anchor::ErrorKind::kRuntime, "no ANCHOR_PILOT_SPEC");
    const protocol::Spec spec = protocol::read_spec(spec_path);
    const Script script = read_script();
    return spec.role == protocol::Role::kReference ? reference(spec, script) : resume(spec, script);
  } catch (const std::exception& e) {
    protocol::emit(protocol::ErrorLine{e.what(), "", ""});
    return 1;
  }
}
