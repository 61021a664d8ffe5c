// ZeRO-1 / ZeRO-2 across real processes on Gloo (docs/distributed.md,
// "Sharded strategies"), distributed checkpoints written by every rank, and
// restores at another world size (docs/checkpoints.md). Ranks are
// tests/support/dist_rank.cpp.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/dist_ranks.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::max_diff;
using anchor::testing::RankRun;
using anchor::testing::read_floats;
using anchor::testing::read_json;
using anchor::testing::run_ranks;

using namespace anchor;
using nlohmann::json;
namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<std::string> lines(const fsys::path& p) {
  std::ifstream f(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(f, l);) v.push_back(l);
  return v;
}

class Zero : public ::testing::Test {
 protected:
  void SetUp() override { anchor::testing::write_corpus(dir_ / "train.txt", "the ranks shard the optimizer"); }

  // dropout 0 (the RNG streams change with the world size); grad_clip 0.05 so
  // that clipping by the global norm is exercised on every step.
  std::string config(const std::string& strategy, int micro_batch, double timeout_s = 60) {
    auto p = dir_ / ("cfg-" + strategy + "-" + std::to_string(micro_batch) + ".yaml");
    std::ofstream(p)
        << "run: {seed: 7, threads: 1}\n"
           "model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, dropout: 0.0}\n"
           "data: {train: ["
        << (dir_ / "train.txt").string() << "], seq_len: 32, val_fraction: 0.1}\n"
        << "train: {micro_batch: " << micro_batch
        << ", grad_accum: 2, total_steps: 100, schedule: {warmup_steps: 2}, optimizer: {grad_clip: 0.05}}\n"
        << "distributed: {timeout_s: " << timeout_s << ", bucket_mb: 0.05, strategy: " << strategy << "}\n";
    return p.string();
  }

  std::vector<RankRun> run(const std::string& cfg, int world, int steps, const std::string& out,
                           const std::vector<std::string>& extra = {},
                           const std::map<std::string, std::string>& env = {}) {
    return run_ranks(DIST_RANK, cfg, world, steps, (dir_ / out).string(), extra, env);
  }
  void ok(const std::vector<RankRun>& rs) {
    for (const auto& r : rs) ASSERT_EQ(r.status, 0) << r.out;
  }
  // Every "optimizer/..." tensor digest of a state digest.
  static json opt_tensors(const json& state) {
    json o = json::object();
    for (const auto& [k, v] : state["tensors"].items())
      if (k.rfind("optimizer/", 0) == 0) o[k] = v;
    return o;
  }
  static json model_tensors(const json& state) {
    json o = json::object();
    for (const auto& [k, v] : state["tensors"].items())
      if (k.rfind("model/", 0) == 0) o[k] = v;
    return o;
  }
  anchor::testing::TempDir tmp_{"zero"};
  const std::filesystem::path& dir_ = tmp_.path();
};

// The claim: with 2 ranks, ZeRO-1 and ZeRO-2 give BITWISE the parameters DDP
// gives. Every element goes through the same arithmetic: the sum of two
// gradients (a + b == b + a, whether all-reduced or reduced to the owner), the
// same division, the same global norm (ZeRO-2 all-reduces the vector of
// per-parameter norms, each entry from one rank, x + 0 == x), the same AdamW
// on the owner, and a broadcast that copies bytes. (With more than 2 ranks the
// reduction order of reduce and all-reduce may differ: not claimed.)
TEST_F(Zero, Zero1AndZero2EqualDdpBitwiseAndHoldLessOptimizerState) {
  ok(run(config("ddp", 2), 2, 3, "ddp"));
  ok(run(config("zero1", 2), 2, 3, "z1"));
  ok(run(config("zero2", 2), 2, 3, "z2"));
  const auto ddp = read_floats(dir_ / "ddp.rank0");
  ASSERT_GT(ddp.size(), 1000u);
  for (const std::string s : {"z1", "z2"}) {
    for (int r = 0; r < 2; ++r) {
      const auto p = read_floats(dir_ / (s + ".rank" + std::to_string(r)));
      ASSERT_EQ(p.size(), ddp.size());
      EXPECT_TRUE(p == ddp) << s << " rank " << r << " differs from DDP by " << max_diff(p, ddp).abs;
    }
    // Same losses and gradient norms (clipping active: norm > grad_clip) on every step.
    const auto a = lines(dir_ / "ddp.rank0.json"), b = lines(dir_ / (s + ".rank0.json"));
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto ja = json::parse(a[i]), jb = json::parse(b[i]);
      EXPECT_EQ(ja["loss"], jb["loss"]) << s;
      EXPECT_EQ(ja["grad_norm"], jb["grad_norm"]) << s;
      EXPECT_GT(jb["grad_norm"].get<double>(), 0.05) << "clipping not exercised";
      EXPECT_GT(jb["comm_s"].get<double>(), 0.0);
    }
  }
  // Memory: each rank holds the optimizer state of its parameters only; the
  // shards partition DDP's state; ZeRO-2 also keeps only its gradients.
  std::int64_t opt_sum[3] = {0, 0, 0};
  const char* names[3] = {"ddp", "z1", "z2"};
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 2; ++r) {
      const auto j = read_json(dir_ / (std::string(names[k]) + ".rank" + std::to_string(r) + ".sharding.json"));
      std::cout << names[k] << " rank " << r << ": " << j.dump() << "\n";
      const auto ob = j["optimizer_bytes"].get<std::int64_t>(), od = j["optimizer_bytes_ddp"].get<std::int64_t>();
      const auto gb = j["gradient_bytes"].get<std::int64_t>(), gd = j["gradient_bytes_ddp"].get<std::int64_t>();
      opt_sum[k] += ob;
      if (k == 0) {
        EXPECT_EQ(ob, od);
        EXPECT_EQ(gb, gd);
      } else {
        EXPECT_LT(ob, od);
        EXPECT_LE(ob, od * 6 / 10) << "the partition is badly balanced";
        if (k == 1)
          EXPECT_EQ(gb, gd);  // ZeRO-1 keeps full gradients
        else
          EXPECT_LT(gb, gd);  // ZeRO-2 keeps its shard's
      }
    }
  EXPECT_EQ(opt_sum[1], read_json(dir_ / "ddp.rank0.sharding.json")["optimizer_bytes"].get<std::int64_t>());
  EXPECT_EQ(opt_sum[2], opt_sum[1]);

  // Negative control: one rank on half the global batch (what a rank would
  // train on without the gradient reduce) is not equal.
  ok(run(config("zero2", 2), 1, 3, "half"));
  const auto h = read_floats(dir_ / "half.rank0");
  EXPECT_FALSE(h == ddp);
  EXPECT_GT(max_diff(h, ddp).abs, 1e-3);
}

// Three ranks. ZeRO-1 averages gradients with the very all-reduce DDP uses,
// so it stays bitwise equal to DDP; ZeRO-2 reduces each owner's buckets to it,
// and with three addends Gloo's reduce may associate the sum differently from
// its all-reduce, so only rounding-level equality is claimed: within 1e-6
// (parameters are O(0.01..1)). The shards still partition DDP's state exactly.
// Negative control: one rank on a third of the global batch is > 1e-3 away.
TEST_F(Zero, ThreeRanksZero1BitwiseZero2WithinRoundingOfDdp) {
  ok(run(config("ddp", 2), 3, 3, "ddp3"));
  ok(run(config("zero1", 2), 3, 3, "z13"));
  ok(run(config("zero2", 2), 3, 3, "z23"));
  const auto ddp = read_floats(dir_ / "ddp3.rank0");
  ASSERT_GT(ddp.size(), 1000u);
  double z2_worst = 0;
  for (int r = 0; r < 3; ++r) {
    const auto z1 = read_floats(dir_ / ("z13.rank" + std::to_string(r)));
    ASSERT_EQ(z1.size(), ddp.size());
    EXPECT_TRUE(z1 == ddp) << "zero1 rank " << r << " differs from DDP by " << max_diff(z1, ddp).abs;
    const auto z2 = read_floats(dir_ / ("z23.rank" + std::to_string(r)));
    ASSERT_EQ(z2.size(), ddp.size());
    z2_worst = std::max(z2_worst, max_diff(z2, ddp).abs);
    // Every rank of a strategy holds the same parameters (the broadcast).
    EXPECT_TRUE(z2 == read_floats(dir_ / "z23.rank0")) << "zero2 rank " << r << " differs from zero2 rank 0";
  }
  std::cout << "3 ranks: zero2 vs DDP max abs diff " << z2_worst << "\n";
  EXPECT_LE(z2_worst, 1e-6);
  for (const std::string s : {"z13", "z23"}) {
    std::int64_t opt_sum = 0;
    for (int r = 0; r < 3; ++r) {
      const auto j = read_json(dir_ / (s + ".rank" + std::to_string(r) + ".sharding.json"));
      const auto ob = j["optimizer_bytes"].get<std::int64_t>(), od = j["optimizer_bytes_ddp"].get<std::int64_t>();
      opt_sum += ob;
      EXPECT_LE(ob, od * 45 / 100) << s << " rank " << r << ": the partition is badly balanced";
    }
    EXPECT_EQ(opt_sum, read_json(dir_ / "ddp3.rank0.sharding.json")["optimizer_bytes"].get<std::int64_t>()) << s;
  }
  ok(run(config("zero2", 2), 1, 3, "third"));
  const double dn = max_diff(read_floats(dir_ / "third.rank0"), ddp).abs;
  std::cout << "negative control (one rank, a third of the batch): max abs diff " << dn << "\n";
  EXPECT_GT(dn, 1e-3);
}

// Reshard 2 -> 1: a ZeRO-1 checkpoint (each rank's optimizer shard in its own
// file) restored by one rank. Equality: after the restore the model and the
// whole optimizer state are bitwise the saved ones (the union of the shards);
// the resumed steps (1 rank x micro_batch 4) equal the uninterrupted 2-rank
// run (2 x micro_batch 2, same global batch) within 1e-6 — summation order,
// as DDP 1 vs 2 ranks (dropout 0: the RNG stream of rank 1 is dropped).
TEST_F(Zero, ReshardTwoRanksToOne) {
  const auto ck = (dir_ / "ck2").string();
  ok(run(config("zero1", 2), 2, 4, "ref", {"--ckpt", ck, "--save-at", "2"}));
  ASSERT_TRUE(fsys::exists(fsys::path(ck) / "step-00000002" / "COMMITTED"));
  for (const char* f : {"optimizer-rank00000-of-00002.safetensors", "optimizer-rank00001-of-00002.safetensors",
                        "rng-rank00000-of-00002.safetensors", "rng-rank00001-of-00002.safetensors", "model.safetensors",
                        "scaler.safetensors"})
    EXPECT_TRUE(fsys::exists(fsys::path(ck) / "step-00000002" / f)) << f;
  const auto manifest = read_json(fsys::path(ck) / "step-00000002" / "manifest.json");
  EXPECT_EQ(manifest["files"].size(), 7u) << manifest.dump(2);  // 6 + state.json

  ok(run(config("zero1", 4), 1, 2, "one", {"--ckpt", ck, "--restore", "1"}));
  const auto restored = read_json(dir_ / "one.rank0.restored.json");
  EXPECT_EQ(restored["step"], 2);
  json saved_opt = opt_tensors(read_json(dir_ / "ref.rank0.saved2.json"));
  saved_opt.update(opt_tensors(read_json(dir_ / "ref.rank1.saved2.json")));
  EXPECT_GT(saved_opt.size(), 10u);
  EXPECT_EQ(opt_tensors(restored["state"]), saved_opt);  // bitwise: the union of the two shards
  EXPECT_EQ(model_tensors(restored["state"]), model_tensors(read_json(dir_ / "ref.rank0.saved2.json")));
  EXPECT_EQ(restored["rng_restore"]["dropped"], json::array({1}));
  EXPECT_EQ(restored["rng_restore"]["carried"], json::array({0}));

  const auto ref = read_floats(dir_ / "ref.rank0"), one = read_floats(dir_ / "one.rank0");
  const double d = max_diff(ref, one).abs;
  std::cout << "2 -> 1 resume vs uninterrupted: max abs diff " << d << "\n";
  EXPECT_LE(d, 1e-6);

  // Negative control: the same restore without the optimizer shards
  // (ANCHOR_PILOT_FAULT=drop_optimizer: fresh AdamW state) is far outside the bound.
  ok(run(config("zero1", 4), 1, 2, "noopt", {"--ckpt", ck, "--restore", "1"},
         {{"ANCHOR_PILOT_FAULT", "drop_optimizer"}}));
  const double dn = max_diff(ref, read_floats(dir_ / "noopt.rank0")).abs;
  std::cout << "negative control (optimizer state dropped): max abs diff " << dn << "\n";
  EXPECT_GT(dn, 1e-4);
}

// Reshard 1 -> 2: a one-rank checkpoint (optimizer.safetensors, rng.safetensors)
// restored by 2 ZeRO-2 ranks, each taking the state of the parameters it owns;
// rank 0 carries the saved RNG stream, rank 1's is re-derived from
// (run seed, step, rank) and the restore says so.
TEST_F(Zero, ReshardOneRankToTwo) {
  const auto ck = (dir_ / "ck1").string();
  ok(run(config("zero2", 4), 1, 4, "ref", {"--ckpt", ck, "--save-at", "2"}));
  ok(run(config("zero2", 2), 2, 2, "two", {"--ckpt", ck, "--restore", "1"}));
  const auto saved = read_json(dir_ / "ref.rank0.saved2.json");
  json got = json::object();
  for (int r = 0; r < 2; ++r) {
    const auto restored = read_json(dir_ / ("two.rank" + std::to_string(r) + ".restored.json"));
    EXPECT_EQ(model_tensors(restored["state"]), model_tensors(saved));
    auto o = opt_tensors(restored["state"]);
    EXPECT_GT(o.size(), 0u);
    EXPECT_LT(o.size(), opt_tensors(saved).size());  // a shard, not everything
    got.update(o);
  }
  EXPECT_EQ(got, opt_tensors(saved));  // the two shards are exactly the saved state
  const auto rr1 = read_json(dir_ / "two.rank1.restored.json")["rng_restore"];
  EXPECT_EQ(rr1["saved_world_size"], 1);
  ASSERT_EQ(rr1["rederived"].size(), 1u);
  EXPECT_EQ(rr1["rederived"][0]["rank"], 1);
  EXPECT_NE(rr1["rederived"][0]["from"].get<std::string>().find("dropout/step2/rank1"), std::string::npos);

  const auto ref = read_floats(dir_ / "ref.rank0");
  for (int r = 0; r < 2; ++r) {
    const double d = max_diff(ref, read_floats(dir_ / ("two.rank" + std::to_string(r)))).abs;
    std::cout << "1 -> 2 resume vs uninterrupted, rank " << r << ": max abs diff " << d << "\n";
    EXPECT_LE(d, 1e-6);
  }
  // Negative control: the 2 ranks restore the model but not the optimizer state.
  ok(run(config("zero2", 2), 2, 2, "noopt", {"--ckpt", ck, "--restore", "1"},
         {{"ANCHOR_PILOT_FAULT", "drop_optimizer"}}));
  const double dn = max_diff(ref, read_floats(dir_ / "noopt.rank0")).abs;
  std::cout << "negative control (optimizer state dropped): max abs diff " << dn << "\n";
  EXPECT_GT(dn, 1e-4);
}

// A rank killed in the middle of a save (its shard written, not reported):
// the other rank fails within the timeout naming it, the step is not
// committed, and a restore picks the previous committed step.
TEST_F(Zero, RankKilledDuringSaveLeavesNoCommitAndRestoreTakesTheLastCommitted) {
  const double timeout = 20;
  const auto ck = (dir_ / "ckk").string();
  auto rs = run(config("zero1", 2, timeout), 2, 3, "kill", {"--ckpt", ck, "--save-at", "1", "--save-at", "2"},
                {{"ANCHOR_DIST_FAULT", "sigkill_save:1:2"}});
  EXPECT_EQ(rs[1].status, 128 + SIGKILL) << rs[1].out;
  EXPECT_EQ(rs[0].status, 1) << rs[0].out;
  EXPECT_NE(rs[0].out.find("rank 1 did not answer (dead or hung)"), std::string::npos) << rs[0].out;
  std::cout << "rank 0 ended " << rs[0].seconds << " s after its start (timeout " << timeout << " s)\n";
  EXPECT_LT(rs[0].seconds, timeout);  // a dead rank is seen at once (its sockets close), well inside the timeout
  EXPECT_TRUE(fsys::exists(fsys::path(ck) / "step-00000001" / "COMMITTED"));
  EXPECT_FALSE(fsys::exists(fsys::path(ck) / "step-00000002"));
  for (const auto& e : fsys::directory_iterator(ck))
    EXPECT_EQ(e.path().filename().string().find("step-00000002"), std::string::npos) << e.path();

  ok(run(config("zero1", 2, timeout), 2, 1, "after", {"--ckpt", ck, "--restore", "1"}));
  EXPECT_EQ(read_json(dir_ / "after.rank0.restored.json")["step"], 1);
}

// Rank 0 (the committer, the store's host) killed in the save: rank 1 fails
// naming rank 0; nothing is committed.
TEST_F(Zero, Rank0KilledDuringSaveEndsRank1NamingIt) {
  const double timeout = 10;
  const auto ck = (dir_ / "ck0").string();
  auto rs = run(config("zero2", 2, timeout), 2, 2, "k0", {"--ckpt", ck, "--save-at", "1"},
                {{"ANCHOR_DIST_FAULT", "sigkill_save:0:1"}});
  EXPECT_EQ(rs[0].status, 128 + SIGKILL) << rs[0].out;
  EXPECT_EQ(rs[1].status, 1) << rs[1].out;
  EXPECT_NE(rs[1].out.find("rank 0"), std::string::npos) << rs[1].out;
  std::cout << "rank 1 ended " << rs[1].seconds << " s after its start (timeout " << timeout << " s)\n";
  EXPECT_LT(rs[1].seconds, timeout);
  EXPECT_FALSE(fsys::exists(fsys::path(ck) / "step-00000001" / "COMMITTED"));
}

}  // namespace
