// What the console shows of a worker's steps (include/anchor/protocol/progress.hpp): the
// step line's wording, which lines show at info, a worker's step lines as shown, and the
// live line drawn on a real terminal (a pty).
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anchor/log.hpp"
#include "anchor/protocol/progress.hpp"
#include "anchor/protocol/worker_protocol.hpp"

using anchor::protocol::StageWatch;
using anchor::protocol::StepLineRule;
using anchor::protocol::StepShown;

namespace {

StepShown full_step() {
  StepShown s;
  s.done = 3;
  s.end = 300;
  s.loss = 4.12345;
  s.grad_norm = 0.5;
  s.lr = 1e-3;
  s.tokens_per_s = 1234.4;
  s.step_s = 0.0125;
  s.eta_s = 12.34;
  return s;
}

}  // namespace

TEST(Progress, AStepLineSaysWhatTheWorkerReportedAndLeavesOutWhatItDidNot) {
  EXPECT_EQ(step_line("A", full_step()),
            "A step 3/300 loss=4.1235 grad_norm=0.5000 lr=1.000e-03 1234 tok/s (0.013s, eta 12.3s)");
  StepShown bare;
  bare.done = 7;
  bare.end = 8;
  bare.loss = 2.5;
  EXPECT_EQ(step_line("B rank 1", bare), "B rank 1 step 7/8 loss=2.5000");
}

TEST(Progress, AboutTwentyStepLinesAWorkerShowTheFirstEveryNthAndTheLast) {
  auto count = [](std::int64_t start, std::int64_t end) {
    const StepLineRule rule(start, end);
    int n = 0;
    for (std::int64_t done = start + 1; done <= end; ++done) n += rule.shown(done) ? 1 : 0;
    return n;
  };
  EXPECT_EQ(count(0, 40), 21);   // the first, every 2nd, the last (40 is both)
  EXPECT_EQ(count(20, 40), 20);  // 20 steps of its own: every one
  EXPECT_EQ(count(0, 5), 5);
  EXPECT_EQ(count(0, 1000), 21);  // every 50th and the first
  EXPECT_EQ(count(1000, 1003), 3);
  const StepLineRule rule(0, 1000);
  EXPECT_TRUE(rule.shown(1));
  EXPECT_FALSE(rule.shown(2));  // the control: not every step
  EXPECT_TRUE(rule.shown(1000));
}

TEST(Progress, AStepAccountShowsAWorkersStepLinesWithTheirRateAndEta) {
  namespace pp = anchor::protocol;
  anchor::protocol::StepAccount account(/*stop_at=*/10);
  pp::StepLine l;
  l.step = 3;
  l.loss = {true, 4.5};
  l.grad_norm = {true, std::numeric_limits<double>::infinity()};
  l.tokens = 1000;
  l.data_wait_s = 0.5;
  l.compute_s = 1.5;
  const auto shown = account.saw(l);
  ASSERT_TRUE(shown.has_value());
  EXPECT_EQ(shown->done, 3);
  EXPECT_EQ(shown->end, 10);  // the account's, the line gave none
  EXPECT_DOUBLE_EQ(*shown->loss, 4.5);
  EXPECT_TRUE(std::isinf(*shown->grad_norm)) << "an infinite figure is shown as one (\"inf\" on the wire)";
  EXPECT_NE(step_line("A", *shown).find("grad_norm=inf"), std::string::npos) << step_line("A", *shown);
  EXPECT_FALSE(shown->lr.has_value()) << "an unknown figure is left out";
  EXPECT_DOUBLE_EQ(*shown->tokens_per_s, 500.0);
  EXPECT_DOUBLE_EQ(*shown->eta_s, 2.0 * 7);
  EXPECT_FALSE(account.saw(l).has_value()) << "a step reported again is not another step";
  l.step = 4;
  l.stop_at = 6;  // the built-in worker says where it stops
  l.compute_s = 3.5;
  l.tokens.reset();
  const auto next = account.saw(l);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->end, 6);
  EXPECT_FALSE(next->tokens_per_s.has_value());
  EXPECT_DOUBLE_EQ(*next->eta_s, 3.0 * 2);  // the mean of 2 s and 4 s, two steps left
}

// Runs `draw` with stderr on a fresh pty `cols` wide (TERM=xterm) and returns
// what the terminal received.
template <class Draw>
std::string on_a_pty(unsigned short cols, Draw draw) {
  int master = -1, slave = -1;
  winsize ws{};
  ws.ws_col = cols;
  ws.ws_row = 20;
  EXPECT_EQ(::openpty(&master, &slave, nullptr, nullptr, &ws), 0);
  const char* term = std::getenv("TERM");
  const std::string saved_term = term ? term : "";
  ::setenv("TERM", "xterm", 1);  // TERM=dumb (Emacs, some CI) is no terminal
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(slave, STDERR_FILENO);
  draw();
  std::fflush(stderr);
  anchor::log::flush();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(slave);
  if (term)
    ::setenv("TERM", saved_term.c_str(), 1);
  else
    ::unsetenv("TERM");
  // Everything written is in the pty's buffer; read until the slave's close shows (EIO) or 5 s pass quiet.
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd pfd{master, POLLIN, 0};
    if (::poll(&pfd, 1, 5000) <= 0) break;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(master);
  return out;
}

// The live line on a real terminal: redrawn in place from the first step, cut
// to the terminal's width so it never wraps, erased at the stage's end, which
// leaves the last step as a plain line; a worker that stops inside a stage
// leaves its last step too. The control: a watch that may not redraw (a
// program pilot's) draws nothing on the same terminal.
TEST(Progress, TheLiveLineIsRedrawnInPlaceWithinTheTerminalsWidth) {
  anchor::log::init(anchor::log::Level::kInfo);
  const std::string out = on_a_pty(60, [] {
    StageWatch watch("A", /*may_redraw=*/true);
    EXPECT_TRUE(watch.live());
    watch.started("train");
    watch.step(full_step());
    watch.ended();
    watch.started("reference");
    watch.step(full_step());
    watch.stopped();
  });
  const std::string drawn = "\r\x1b[K[stage] A: train, step 3/300, loss 4.1235, 1234 tok/s, E";
  const auto at = out.find(drawn);
  ASSERT_NE(at, std::string::npos) << out;
  const auto end = out.find('\r', at + 4);
  ASSERT_NE(end, std::string::npos) << out;
  EXPECT_EQ(end - (at + 4), 59u) << "cut to 59 of the terminal's 60 columns: " << out.substr(at, end - at);
  EXPECT_EQ(out.compare(end, 5, "\r\r\x1b[K"), 0) << "erased at the stage's end";
  EXPECT_NE(out.find("[stage] A: train done in 0 s, step 3/300, loss 4.1235, 1234 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("[stage] A: reference stopped after 0 s, step 3/300, loss 4.1235, 1234 tok/s"), std::string::npos)
      << out;

  const std::string never = on_a_pty(60, [] {
    StageWatch watch("A", /*may_redraw=*/false);
    EXPECT_FALSE(watch.live()) << "a program pilot's watch never redraws";
    watch.started("train");
    watch.step(full_step());
    watch.ended();
  });
  EXPECT_NE(never.find("[stage] A: train"), std::string::npos) << never;
  EXPECT_EQ(never.find("\r\x1b[K"), std::string::npos) << never;
  EXPECT_EQ(never.find("step 3/300"), std::string::npos) << never;
}

// The cut never splits a character: a stage named in UTF-8 is cut before a
// character that would not fit, never inside it.
TEST(Progress, TheLiveLineIsCutBetweenCharacters) {
  anchor::log::init(anchor::log::Level::kInfo);
  // "[stage] A: " is 11 bytes, then 2-byte characters: at 41 columns the line may hold 40 bytes, and byte 40
  // is the second of the 15th character's two, so the line ends after the 14th (39 bytes).
  std::string stage;
  for (int i = 0; i < 30; ++i) stage += "\xc3\xa9";  // é
  const std::string out = on_a_pty(41, [&] {
    StageWatch watch("A", /*may_redraw=*/true);
    watch.started(stage);
    watch.step(full_step());
  });
  const auto at = out.find("\r\x1b[K[stage] A: \xc3\xa9");
  ASSERT_NE(at, std::string::npos) << out;
  const auto end = out.find('\r', at + 4);
  ASSERT_NE(end, std::string::npos);
  const std::string line = out.substr(at + 4, end - at - 4);
  EXPECT_EQ(line.size(), 11u + 2 * 14) << "14 whole characters, not 14 and half of the 15th: " << line;
  EXPECT_NE(static_cast<unsigned char>(line.back()), 0xc3) << "the last character is whole";
}
