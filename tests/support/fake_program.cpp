// A stand-in for a user's training program under `anchor pilot` with
// program.command (docs/program.md), speaking the worker protocol into the
// events file its spec names, as python/anchor_pilot does, without Python or
// LibTorch. The program pilot's driver tests (tests/unit/pilot/
// test_program_pilot.cpp) run the real run_program_pilot against it: its
// process handling, the SIGKILL inside a save, the verdict, the report and the
// JUnit file, in milliseconds.
//
// It trains a real, tiny state (four weights, their momentum, an RNG counter
// and a data cursor) and saves it in the committed checkpoint layout through
// anchor's own store (step-N/{model,optimizer}.safetensors, state.json,
// manifest.json, COMMITTED); worker B restores the newest checkpoint that
// verifies and reports the digests of what it read back. So a save that leaves
// a component out is a real mismatch, found by the real comparison.
//
// What it does besides is scripted by ANCHOR_FAKE_PROGRAM, a comma-separated
// list. "what@WHO.point[=value]" acts at a point of worker A, B or the probe P
// (every rank; "A1" only rank 1): points start (before its hello), train (its
// first step), save (each save, before its digests), restore (B, before it).
//   exit@A.train=2      exit with status 2
//   crash@B.restore     raise SIGSEGV
//   error@A.save        an error line ("the fake failed in save"), exit 1
//   signal@B.train=INT  send SIGINT (or TERM) to the supervisor, then wait to be stopped
//   hang@A.train        wait to be stopped (program.timeout_s)
//   garbage@A.train     write a line that is not JSON, then go on
//   past_stop@A.train   report a step past stop_at
// And for the whole run:
//   forget=optimizer    the saves leave the optimizer out: B restores it fresh
//   restore_error       B says RestoreError after its restore's digests (the helper's check_restore)
//   skip_restore        B trains from the start without restoring
//   loss_off            B's first resumed loss is off by 1e-3
//   no_hello            no hello line (the program does not use anchor_pilot)
//   no_shape            no shape in the hello: nothing to plan from
//   wrong_tokens        the probe reports other tokens than its shape's
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/protocol/worker_protocol.hpp"

namespace {

namespace protocol = anchor::protocol;
namespace ckpt = anchor::checkpoint;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The declared shape: micro-batch 4 of 64 tokens.
constexpr std::int64_t kMicroBatch = 4, kSeqLen = 64;

struct Script {
  std::vector<std::string> items;
  bool has(const std::string& item) const {
    for (const auto& i : items)
      if (i == item || i.rfind(item + "=", 0) == 0) return true;
    return false;
  }
  std::string value(const std::string& item) const {
    for (const auto& i : items)
      if (i.rfind(item + "=", 0) == 0) return i.substr(item.size() + 1);
    return "";
  }
};

Script read_script() {
  Script s;
  const char* env = std::getenv("ANCHOR_FAKE_PROGRAM");
  const std::string text = env ? env : "";
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) s.items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return s;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The events file, appended one whole line per write (ranks share it).
class Events {
 public:
  Events(const std::string& path, int rank)
      : fd_(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)), rank_(rank) {
    if (!fd_) throw anchor::Error(anchor::ErrorKind::kIo, "cannot open the events file " + path);
  }
  void emit(protocol::Body b) const { raw(anchor::dump_json(protocol::to_json(protocol::line(std::move(b), rank_)))); }
  void raw(const std::string& text) const {
    const std::string out = text + "\n";
    if (::write(fd_.get(), out.data(), out.size()) != static_cast<ssize_t>(out.size())) std::_Exit(90);
  }

 private:
  anchor::fs::UniqueFd fd_;
  int rank_;
};

void wait_to_be_stopped() {
  for (;;) ::pause();
}

// The state a step changes: what the pilot must bring back.
struct State {
  std::array<float, 4> w{0.5F, -0.25F, 1.0F, 2.0F};  // model
  std::array<float, 4> m{};                          // optimizer (momentum)
  std::uint64_t rng = 42;                            // rng
  std::int64_t cursor = 0;                           // data

  double step() {  // one step of SGD with momentum towards 0 on a noisy quadratic
    double loss = 0;
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    const float noise = static_cast<float>(rng >> 40) / static_cast<float>(1ULL << 24) * 0.01F;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const float g = 2 * w[i] + noise;
      m[i] = 0.9F * m[i] + g;
      w[i] -= 0.05F * m[i];
      loss += static_cast<double>(w[i]) * w[i];
    }
    cursor += kMicroBatch;
    return loss;
  }

  protocol::DigestsLine digests(const std::string& when, std::int64_t s) const {
    protocol::DigestsLine d;
    d.step = s;
    d.when = when;
    d.components = {{"model", anchor::sha256_hex({reinterpret_cast<const char*>(w.data()), sizeof w})},
                    {"optimizer", anchor::sha256_hex({reinterpret_cast<const char*>(m.data()), sizeof m})},
                    {"rng", anchor::sha256_hex(std::to_string(rng))},
                    {"data", anchor::sha256_hex(std::to_string(cursor))}};
    return d;
  }
};

class Program {
 public:
  Program(const protocol::Spec& spec, Script script)
      : spec_(spec),
        script_(std::move(script)),
        rank_(env_int("RANK", 0)),
        world_(env_int("WORLD_SIZE", 1)),
        who_(spec.role == protocol::Role::kReference ? "A"
             : spec.role == protocol::Role::kResume  ? "B"
                                                     : "P"),
        events_(spec.events, rank_) {}

  int run() {
    at("start");
    if (!script_.has("no_hello")) hello();
    if (spec_.role == protocol::Role::kProbe) return probe();
    std::int64_t from = 0;
    if (spec_.role == protocol::Role::kResume && !script_.has("skip_restore")) {
      at("restore");
      from = restore();
    }
    for (std::int64_t s = from + 1; s <= spec_.stop_at; ++s) {
      if (s == from + 1) at("train");
      double loss = state_.step();
      if (spec_.role == protocol::Role::kResume && s == from + 1 && script_.has("loss_off")) loss += 1e-3;
      step_line(s, loss, kMicroBatch * kSeqLen);
      if (s == from + 1 && script_.has("past_stop@" + who_ + ".train")) step_line(spec_.stop_at + 1, loss, 0);
      if (s == from + 2) step_memory(kMicroBatch, kSeqLen);  // a process's second step
      for (auto at_step : spec_.save_at)
        if (at_step == s) save(s);
    }
    return 0;
  }

 private:
  // The scripted action at `point`, if any.
  void at(const std::string& point) {
    for (const std::string& who : {who_, who_ + std::to_string(rank_)}) {
      const std::string key = "@" + who + "." + point;
      const auto item = [&](const char* what) { return std::string(what) + key; };
      if (script_.has(item("exit"))) {
        std::fflush(nullptr);
        std::_Exit(std::atoi(script_.value(item("exit")).c_str()));
      }
      if (script_.has(item("crash"))) {
        ::signal(SIGSEGV, SIG_DFL);
        ::raise(SIGSEGV);
      }
      if (script_.has(item("error"))) {
        events_.emit(protocol::ErrorLine{"the fake failed in " + point, "", "it was told to"});
        std::_Exit(1);
      }
      if (script_.has(item("signal"))) {
        ::kill(::getppid(), script_.value(item("signal")) == "TERM" ? SIGTERM : SIGINT);
        wait_to_be_stopped();
      }
      if (script_.has(item("hang"))) wait_to_be_stopped();
      if (script_.has(item("garbage"))) events_.raw("this is not JSON");
    }
  }

  void hello() {
    protocol::Hello h;
    h.role = protocol::role_name(spec_.role);
    h.world_size = world_;
    h.versions = {"2.15.0", "", "", "", "3.11.2"};
    h.anchor_pilot = "fake";
    h.parameters = static_cast<std::int64_t>(state_.w.size());
    h.executable = "/proc/self/exe";
    h.pid = ::getpid();
    if (!script_.has("no_shape")) {
      protocol::Shape shape;
      shape.micro_batch = kMicroBatch;
      shape.seq_len = kSeqLen;
      shape.n_layer = 2;
      shape.n_embd = 32;
      shape.probe = true;
      h.shape = shape;
    }
    events_.emit(h);
    protocol::ProgramLine p;
    const auto cwd = std::filesystem::current_path();
    p.root = cwd.string();
    if (std::filesystem::exists(cwd / "train.py")) p.sources = {(cwd / "train.py").string()};
    p.executable = std::filesystem::read_symlink("/proc/self/exe").string();
    events_.emit(p);
  }

  void step_line(std::int64_t s, double loss, std::int64_t tokens) {
    protocol::StepLine l;
    l.step = s;
    l.loss = {true, loss};
    l.grad_norm = {true, 1.5};
    l.lr = {true, 0.05};
    l.tokens = tokens;
    l.data_wait_s = 0.001;
    l.compute_s = 0.01;
    events_.emit(l);
  }

  // The peak of the second step: 20 MB the process held before, 1 kB a token.
  void step_memory(std::int64_t mb, std::int64_t seq) {
    protocol::StepMemoryLine sm;
    sm.step = 2;
    sm.device = "cpu";
    sm.peak_source = "the fake's arithmetic";
    sm.baseline_bytes = 20'000'000;
    sm.peak_bytes = 20'000'000 + 1000 * mb * seq;
    sm.parameters_bytes = sm.gradients_bytes = sm.optimizer_bytes = 16;
    events_.emit(sm);
  }

  // Every rank reports its digests before a file; rank 0 writes the checkpoint,
  // and waits in the save anchor kills once its first file is written.
  void save(std::int64_t s) {
    at("save");
    const auto t0 = Clock::now();
    protocol::CheckpointLine begin;
    begin.op = "save";
    begin.phase = "begin";
    begin.step = s;
    begin.dir = spec_.checkpoint_dir + "/" + ckpt::step_dir_name(s);
    events_.emit(begin);
    events_.emit(state_.digests("save", s));
    const bool killed_here = spec_.kill_in_save && *spec_.kill_in_save == s;
    if (rank_ != 0) {
      if (killed_here) wait_to_be_stopped();
      return;
    }
    ckpt::SaveRequest req;
    req.step = s;
    req.files.push_back({"model.safetensors", {{"w", ckpt::DType::F32, {4}, state_.w.data(), sizeof state_.w}}, {}});
    if (script_.value("forget") != "optimizer")
      req.files.push_back(
          {"optimizer.safetensors", {{"m", ckpt::DType::F32, {4}, state_.m.data(), sizeof state_.m}}, {}});
    req.state = {{"rng", std::to_string(state_.rng)}, {"cursor", state_.cursor}};
    const auto result = ckpt::Store(spec_.checkpoint_dir).save(req, [&](std::string_view point) {
      if (killed_here && point == "after_file:model.safetensors") {
        protocol::CheckpointLine window;
        window.op = "save";
        window.phase = "kill_window";
        window.step = s;
        window.point = std::string(point);
        events_.emit(window);
        wait_to_be_stopped();
      }
    });
    protocol::CheckpointLine end = begin;
    end.phase = "end";
    end.dir = result.dir;
    end.bytes = static_cast<std::int64_t>(result.bytes);
    end.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    events_.emit(end);
  }

  // The newest checkpoint that verifies, read back into the state; its step.
  std::int64_t restore() {
    const auto t0 = Clock::now();
    const auto loaded = ckpt::Store(spec_.checkpoint_dir).restore_newest();
    if (!loaded) {
      events_.emit(protocol::ErrorLine{"no checkpoint in " + spec_.checkpoint_dir + " verifies", "", ""});
      std::_Exit(1);
    }
    const auto read = [&](const char* file, const char* tensor, std::array<float, 4>& into) {
      const auto f = loaded->files.find(file);
      if (f == loaded->files.end()) return;  // left out of the save: it stays as a fresh start has it
      const auto* e = f->second.find(tensor);
      if (!e || e->end - e->begin != sizeof into) throw anchor::Error(anchor::ErrorKind::kRuntime, "bad tensor");
      std::memcpy(into.data(), f->second.data(*e), sizeof into);
    };
    read("model.safetensors", "w", state_.w);
    read("optimizer.safetensors", "m", state_.m);
    state_.rng = std::stoull(loaded->state.at("rng").get<std::string>());
    state_.cursor = loaded->state.at("cursor").get<std::int64_t>();
    protocol::CheckpointLine end;
    end.op = "restore";
    end.phase = "end";
    end.step = loaded->step;
    end.dir = loaded->dir;
    end.bytes = 1000;
    end.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    events_.emit(end);
    events_.emit(state_.digests("restore", loaded->step));
    if (script_.has("restore_error")) {
      events_.emit(protocol::ErrorLine{"a component differs after load_state_dict", "RestoreError", ""});
      std::_Exit(1);
    }
    return loaded->step;
  }

  // Two steps at the shape anchor asks for, saving nothing.
  int probe() {
    const auto [mb, seq] = spec_.probe.value_or(std::make_pair(kMicroBatch, kSeqLen));
    for (std::int64_t s = 1; s <= 2; ++s) {
      if (s == 1) at("train");
      step_line(s, state_.step(), mb * seq + (script_.has("wrong_tokens") ? 1 : 0));
    }
    step_memory(mb, seq);
    return 0;
  }

  const protocol::Spec& spec_;
  const Script script_;
  const int rank_, world_;
  const std::string who_;
  const Events events_;
  State state_;
};

}  // namespace

int main() {
  try {
    const char* spec_path = std::getenv(protocol::kSpecEnv);
    if (!spec_path) {
      std::fprintf(stderr, "fake_program: run by `anchor pilot` with program.command (no %s)\n", protocol::kSpecEnv);
      return 2;
    }
    const protocol::Spec spec = protocol::read_spec(spec_path);
    return Program(spec, read_script()).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_program: %s\n", e.what());
    return 1;
  }
}
