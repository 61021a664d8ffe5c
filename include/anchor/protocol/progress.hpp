#pragma once
// What the console says while a pilot's workers run (docs/pilot.md, "Following
// a run"): each stage announced as it starts, how long a long one has lasted,
// and the steps: a live line on a terminal, about 20 plain lines per worker
// elsewhere. No LibTorch: the supervisor and the worker both use it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace anchor::protocol {
struct StepLine;

// Set by the supervisor in a built-in worker's environment when it draws that
// worker's live line (stderr a terminal, info on): the worker then logs its
// step lines at debug (the supervisor draws its `step` lines), and each of its log lines first clears the terminal
// line (the live line ends at column 0, where the worker's line starts).
inline constexpr const char* kLiveProgressEnv = "ANCHOR_LIVE_PROGRESS";

// Whether stderr is a terminal a line can be redrawn on (TERM=dumb is not).
bool stderr_is_live_terminal();

// Whether this process is a worker whose progress the supervisor draws.
bool live_progress_requested();

// One completed step as the console shows it.
struct StepShown {
  std::int64_t done = 0;  // steps completed (the step count after this step)
  std::int64_t end = 0;   // the step count the worker stops at
  std::optional<double> loss, grad_norm, lr;
  std::optional<double> tokens_per_s;
  std::optional<double> step_s;  // this step's data wait + compute
  std::optional<double> eta_s;   // the worker's remaining steps at its mean step time so far
};

// A worker's `step` lines (worker_protocol.hpp) as the console shows them: the
// step count it stops at (the line's stop_at, else `stop_at`), the step's time
// and tokens/s, and the ETA at the mean step time of the lines seen so far.
class StepAccount {
 public:
  explicit StepAccount(std::int64_t stop_at = 0) : stop_at_(stop_at) {}
  // nullopt for a step reported again (not another step).
  std::optional<StepShown> saw(const protocol::StepLine& s);

 private:
  std::int64_t stop_at_;
  std::optional<std::int64_t> last_;
  double spent_s_ = 0;
  std::int64_t timed_ = 0;
};

// "A step 3/4 loss=4.1234 grad_norm=0.5000 lr=1.000e-03 1234 tok/s (0.012s, eta 0.0s)";
// a figure the worker did not report is left out.
std::string step_line(const std::string& who, const StepShown& s);

// Which of a worker's step lines are shown at info: its first, every Nth and
// its last, N chosen so that about 20 are (counted in the worker's own steps:
// a worker started from step 1000 runs end - start of them).
class StepLineRule {
 public:
  StepLineRule(std::int64_t start, std::int64_t end);
  bool shown(std::int64_t done) const;

 private:
  std::int64_t start_, end_, every_;
};

// The stage a worker is in and, on a terminal, its live line: announced as it
// starts ("[stage] A: train"); once 2 s old, or from its first step, one line
// redrawn in place at most 4 times a second ("[stage] A: train, step 3/300,
// loss 4.1234, 1234 tok/s, ETA 12 s, 5 s so far"), erased when the stage ends
// or anything else is logged, the stage's last step left as a plain line.
// Without a terminal (CI), or when `may_redraw` is false (the program owns the
// terminal too), a plain line every ANCHOR_PROGRESS_S seconds (default 30), no
// control sequences. Quiet below info (-q).
class StageWatch {
 public:
  using Clock = std::chrono::steady_clock;
  StageWatch(std::string who, bool may_redraw);
  ~StageWatch();
  StageWatch(const StageWatch&) = delete;
  StageWatch& operator=(const StageWatch&) = delete;

  bool live() const { return tty_; }
  void started(const std::string& stage);
  void ended();
  // A step of the stage (live only: elsewhere the worker's own lines say it).
  void step(const StepShown& s);
  // Called at least once a second while the worker runs.
  void tick();
  // How long the worker loop may wait for output before tick() is due.
  int poll_ms() const;
  // Erases the live line (before anything else is written to the console).
  void erase();
  // The worker ended without ending its stage (it failed): erases the live
  // line and leaves the last step it drew as a plain line.
  void stopped();

 private:
  void draw(Clock::time_point now);
  void close_stage(const char* how);  // ended() and stopped()
  std::string who_, stage_;
  bool tty_;
  bool drawn_ = false;
  std::optional<StepShown> step_;
  Clock::time_point step_at_;  // when step_ came: the ETA counts down from it
  std::chrono::duration<double> plain_every_{30.0};
  Clock::time_point t0_, next_;
};

}  // namespace anchor::protocol
