#include "anchor/protocol/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anchor/common/utf8.hpp"
#include "anchor/log.hpp"
#include "anchor/protocol/worker_protocol.hpp"

namespace anchor::protocol {

bool stderr_is_live_terminal() {
  if (::isatty(STDERR_FILENO) != 1) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::string(term) == "dumb");
}

bool live_progress_requested() {
  const char* v = std::getenv(kLiveProgressEnv);
  return v && std::string(v) == "1";
}

std::optional<StepShown> StepAccount::saw(const protocol::StepLine& s) {
  if (last_ && s.step <= *last_) return std::nullopt;
  last_ = s.step;
  StepShown shown;
  shown.done = s.step;
  shown.end = s.stop_at.value_or(stop_at_);
  auto known = [](const protocol::Number& n) { return n.known ? std::optional<double>(n.value) : std::nullopt; };
  shown.loss = known(s.loss);
  shown.grad_norm = known(s.grad_norm);
  shown.lr = known(s.lr);
  if (s.data_wait_s || s.compute_s) {
    const double step_s = s.data_wait_s.value_or(0) + s.compute_s.value_or(0);
    spent_s_ += step_s;
    ++timed_;
    shown.step_s = step_s;
    if (s.tokens && step_s > 0) shown.tokens_per_s = static_cast<double>(*s.tokens) / step_s;
    shown.eta_s =
        spent_s_ / static_cast<double>(timed_) * static_cast<double>(std::max<std::int64_t>(0, shown.end - s.step));
  }
  return shown;
}

std::string step_line(const std::string& who, const StepShown& s) {
  std::string line = fmt::format("{} step {}/{}", who, s.done, s.end);
  if (s.loss) line += fmt::format(" loss={:.4f}", *s.loss);
  if (s.grad_norm) line += fmt::format(" grad_norm={:.4f}", *s.grad_norm);
  if (s.lr) line += fmt::format(" lr={:.3e}", *s.lr);
  if (s.tokens_per_s) line += fmt::format(" {:.0f} tok/s", *s.tokens_per_s);
  if (s.step_s || s.eta_s) {
    line += " (";
    if (s.step_s) line += fmt::format("{:.3f}s", *s.step_s);
    if (s.step_s && s.eta_s) line += ", ";
    if (s.eta_s) line += fmt::format("eta {:.1f}s", *s.eta_s);
    line += ")";
  }
  return line;
}

StepLineRule::StepLineRule(std::int64_t start, std::int64_t end)
    : start_(start), end_(end), every_(std::max<std::int64_t>(1, (end - start + 19) / 20)) {}

bool StepLineRule::shown(std::int64_t done) const {
  const std::int64_t own = done - start_;
  return own == 1 || own % every_ == 0 || done >= end_;
}

namespace {

// The terminal's width, so that the live line never wraps (a wrapped line
// cannot be erased with one \r\033[K); 80 when it cannot be read.
std::size_t terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string seconds_text(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// ", step 3/300, loss 4.1234, 1234 tok/s"
std::string step_figures(const StepShown& s) {
  std::string t = fmt::format(", step {}/{}", s.done, s.end);
  if (s.loss) t += fmt::format(", loss {:.4f}", *s.loss);
  if (s.tokens_per_s) t += fmt::format(", {:.0f} tok/s", *s.tokens_per_s);
  return t;
}

// ANCHOR_PROGRESS_S, read once (a bad value is one warning, not one per worker).
std::chrono::duration<double> plain_interval() {
  static const std::chrono::duration<double> every = [] {
    std::chrono::duration<double> s{30.0};
    if (const char* v = std::getenv("ANCHOR_PROGRESS_S")) {
      char* end = nullptr;
      const double n = std::strtod(v, &end);
      if (end != v && *end == '\0' && std::isdigit(static_cast<unsigned char>(*v)) && n >= 0.1 && n <= 86400)
        s = std::chrono::duration<double>(n);
      else
        ANCHOR_LOG_WARN("stage", "ANCHOR_PROGRESS_S={} is not a number of seconds from 0.1 to 86400; every {:.0f} s",
                        printable(v), s.count());
    }
    return s;
  }();
  return every;
}

}  // namespace

StageWatch::StageWatch(std::string who, bool may_redraw)
    : who_(std::move(who)), tty_(may_redraw && stderr_is_live_terminal()), plain_every_(plain_interval()) {}

StageWatch::~StageWatch() { erase(); }

void StageWatch::started(const std::string& stage) {
  erase();
  stage_ = stage;
  step_.reset();
  t0_ = Clock::now();
  next_ = t0_ + std::chrono::duration_cast<Clock::duration>(tty_ ? std::chrono::duration<double>(2.0) : plain_every_);
  ANCHOR_LOG_INFO("stage", "{}: {}", who_, printable(stage));
}

void StageWatch::ended() { close_stage("done in"); }

void StageWatch::stopped() { close_stage("stopped after"); }

void StageWatch::close_stage(const char* how) {
  erase();
  // The stage's last step stays on the screen as a plain line (the live one is gone).
  if (tty_ && step_ && !stage_.empty() && log::enabled(log::Level::kInfo))
    ANCHOR_LOG_INFO("stage", "{}: {} {} {}{}", who_, printable(stage_), how,
                    seconds_text(std::chrono::duration<double>(Clock::now() - t0_).count()), step_figures(*step_));
  stage_.clear();
  step_.reset();
}

void StageWatch::step(const StepShown& s) {
  if (!tty_ || stage_.empty()) return;
  step_ = s;
  const auto now = Clock::now();
  step_at_ = now;
  // The first step draws at once; later ones at most 4 times a second.
  if (!drawn_ || now >= next_) draw(now);
}

void StageWatch::tick() {
  if (stage_.empty() || !log::enabled(log::Level::kInfo)) return;
  const auto now = Clock::now();
  if (now < next_) return;
  if (tty_) {
    draw(now);
  } else {
    ANCHOR_LOG_INFO("stage", "{}: {}, {} so far", who_, printable(stage_),
                    seconds_text(std::chrono::duration<double>(now - t0_).count()));
    next_ = now + std::chrono::duration_cast<Clock::duration>(plain_every_);
  }
}

void StageWatch::draw(Clock::time_point now) {
  if (!log::enabled(log::Level::kInfo)) return;
  std::string line = "[stage] " + who_ + ": " + printable(stage_);
  if (step_) {
    line += step_figures(*step_);
    // The ETA as of the step, less the time since: it counts down between steps.
    if (step_->eta_s)
      line +=
          ", ETA " + seconds_text(std::max(0.0, *step_->eta_s - std::chrono::duration<double>(now - step_at_).count()));
  }
  line += ", " + seconds_text(std::chrono::duration<double>(now - t0_).count()) + " so far";
  const std::size_t cols = terminal_columns();
  if (line.size() >= cols) {
    std::size_t len = cols > 1 ? cols - 1 : 0;
    while (len > 0 && (static_cast<unsigned char>(line[len]) & 0xC0) == 0x80) --len;  // not inside a character
    line.resize(len);
  }
  std::fprintf(stderr, "\r\033[K%s\r", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
  next_ = now + std::chrono::milliseconds(step_ ? 250 : 1000);
}

int StageWatch::poll_ms() const {
  return tty_ ? 250 : static_cast<int>(std::clamp(plain_every_.count() * 1000, 10.0, 1000.0));
}

void StageWatch::erase() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace anchor::protocol
