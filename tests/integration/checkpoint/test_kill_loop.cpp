// Randomized kill loop: SIGKILL a process that saves checkpoints (through the
// Store, with retention) at random moments; after every kill the newest
// checkpoint that restore picks must be committed, verify, hold the values of
// its step, and be no older than the last save the process reported.
//
// ANCHOR_KILL_TRIALS (default 50) and ANCHOR_KILL_SEED (default 20261129)
// make it longer or reproduce a run.
#include <gtest/gtest.h>

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/process.hpp"
#include "support/checkpoint_fixture.hpp"

namespace {

namespace ck = anchor::checkpoint;

long env_or(const char* name, long def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : def;
}

class KillLoop : public anchor::test::CheckpointDir {};

TEST_F(KillLoop, RestoreAlwaysFindsACommittedVerifiedStep) {
  const long trials = env_or("ANCHOR_KILL_TRIALS", 50);
  const unsigned seed = static_cast<unsigned>(env_or("ANCHOR_KILL_SEED", 20261129));
  std::mt19937 rng(seed);
  std::int64_t last_saved = 0;
  int kills_mid_save = 0, torn_saves = 0, torn_deletes = 0;
  for (long t = 0; t < trials; ++t) {
    SCOPED_TRACE("trial " + std::to_string(t) + " seed " + std::to_string(seed));
    anchor::proc::SpawnOptions o;
    o.capture_stdout = true;
    auto child = anchor::proc::spawn({CKPT_SAVER, root(), "--mib", "3", "--keep", "2"}, o);
    // Wait for 0-2 completed saves (lines, not time), then let a random
    // delay choose where in the following save (or retention) the kill lands.
    const int lines = static_cast<int>(rng() % 3);
    for (int seen = 0; seen < lines;) {
      auto line = anchor::proc::read_line(child.stdout_fd.get());
      ASSERT_TRUE(line.has_value()) << "saver exited early";
      if (line->rfind("saved ", 0) == 0) {
        last_saved = std::stoll(line->substr(6));
        ++seen;
      }
    }
    const long delay_us = static_cast<long>(rng() % 150000);  // about one save + retention cycle
    timespec ts{0, delay_us * 1000};
    ::nanosleep(&ts, nullptr);  // picks the kill moment; nothing waits on the child by time
    ::kill(child.pid, SIGKILL);
    int status = anchor::proc::wait_exit(child.pid);
    // Drain what it printed before dying.
    while (auto line = anchor::proc::read_line(child.stdout_fd.get()))
      if (line->rfind("saved ", 0) == 0) last_saved = std::stoll(line->substr(6));
    child.stdout_fd.reset();
    if (status == 128 + SIGKILL) ++kills_mid_save;

    ck::Store store(root());
    for (const auto& v : store.list())
      if (v.state == "temporary")
        ++torn_saves;
      else if (v.state == "trash")
        ++torn_deletes;
    auto l = store.restore_newest();
    if (last_saved == 0) {
      // Killed before any save returned: whatever is there must not verify-fail.
      if (l) {
        EXPECT_TRUE(store.verify(l->dir).ok);
      }
      continue;
    }
    ASSERT_TRUE(l.has_value()) << "no checkpoint restorable after save " << last_saved;
    EXPECT_GE(l->step, last_saved);
    EXPECT_TRUE(store.verify(l->dir).ok);
    EXPECT_EQ(l->state["step"], l->step);
    const auto& model = l->files.at("model.safetensors");
    const auto* w = model.find("w");
    ASSERT_NE(w, nullptr);
    const float* p = reinterpret_cast<const float*>(model.data(*w));
    const std::int64_t n = w->shape[0];
    for (std::int64_t i : {std::int64_t(0), n / 2, n - 1})
      ASSERT_EQ(p[i], anchor::test::tensor_value(l->step, i)) << "tensor of another step";
    last_saved = l->step;
  }
  std::printf("kill loop: %ld trials, %d kills of a live saver, %d left a torn save, %d a torn delete\n", trials,
              kills_mid_save, torn_saves, torn_deletes);
  EXPECT_GE(kills_mid_save, trials / 2);  // the kills really landed on a live saver
  EXPECT_GT(torn_saves, 0);               // and some of them inside a save
  // Negative control: the same check does catch a torn newest checkpoint.
  ck::Store store(root());
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  std::filesystem::remove(l->dir + "/COMMITTED");
  auto l2 = store.restore_newest();
  EXPECT_TRUE(!l2 || l2->step < l->step);
}

}  // namespace
