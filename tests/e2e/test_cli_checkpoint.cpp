// anchor checkpoint verify/list on the real binary, and the ANCHOR_FAULT seam
// is exercised by the unit tests (fork) and the kill loop (ckpt_saver).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/process.hpp"
#include "support/checkpoint_fixture.hpp"

namespace {

namespace ck = anchor::checkpoint;

class CheckpointCli : public anchor::test::CheckpointDir {
 protected:
  anchor::proc::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), ANCHOR_BINARY);
    anchor::proc::SpawnOptions o;
    o.env["ANCHOR_LOG_LEVEL"] = "warn";
    return anchor::proc::run_capture(args, o);
  }
};

TEST_F(CheckpointCli, VerifyValidAndInvalid) {
  ck::Store store(root());
  auto dir = store.save(anchor::test::make_request(2, 100)).dir;
  auto r = run({"checkpoint", "verify", dir});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(": ok (step 2, committed"), std::string::npos) << r.out;

  // Two problems: a corrupt data byte and a missing file; both explained.
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x55');
  }
  std::filesystem::remove(dir + "/optimizer.safetensors");
  r = run({"checkpoint", "verify", dir});
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("INVALID (invalid), 2 problems"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.safetensors: SHA-256 is "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer.safetensors is missing"), std::string::npos) << r.out;

  r = run({"checkpoint", "verify", dir, "--json"});
  EXPECT_EQ(r.status, 3);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["problems"].size(), 2u);

  r = run({"checkpoint", "verify", root() + "/nope"});
  EXPECT_EQ(r.status, 2);
}

TEST_F(CheckpointCli, ListShowsEveryStepWithState) {
  ck::Store store(root());
  store.save(anchor::test::make_request(2, 100));
  store.save(anchor::test::make_request(4, 100));
  std::filesystem::remove(root() + "/step-00000004/COMMITTED");
  std::filesystem::create_directory(root() + "/step-00000006.tmp-abcd");
  auto r = run({"checkpoint", "list", root()});
  EXPECT_EQ(r.status, 0) << r.out;
  auto row = [&](const std::string& s) { return r.out.find(s) != std::string::npos; };
  EXPECT_TRUE(row("6          temporary")) << r.out;
  EXPECT_TRUE(row("4          uncommitted")) << r.out;
  EXPECT_TRUE(row("2          committed*")) << r.out;
  EXPECT_TRUE(row("- no COMMITTED marker: the save did not finish")) << r.out;
  EXPECT_LT(r.out.find("step-00000006"), r.out.find("step-00000002"));  // newest first

  r = run({"checkpoint", "list", root(), "--json"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[2]["state"], "committed");
  EXPECT_EQ(j[2]["ok"], true);
}

}  // namespace
