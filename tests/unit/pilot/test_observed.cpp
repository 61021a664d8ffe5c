// Observed mode's file arithmetic (anchor/pilot/observed.hpp): a save's file
// named for another step, and what a kill left of a save against the save
// that finished, on real directories.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "anchor/pilot/observed.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace ob = anchor::pilot::observed;
namespace stdfs = std::filesystem;

TEST(Observed, AFileOfOneSaveIsNamedForAnotherStep) {
  EXPECT_EQ(ob::with_step("step_000004/model.pt", 4, 8), "step_000008/model.pt");
  EXPECT_EQ(ob::with_step("checkpoint-4/optimizer.pt", 4, 12), "checkpoint-12/optimizer.pt");
  EXPECT_EQ(ob::with_step("ckpt_0004_of_10/4.pt", 4, 1000), "ckpt_1000_of_10/1000.pt");  // wider than the pad
  // Digit runs that only contain the step are left: v14, 40, 0.
  EXPECT_EQ(ob::with_step("v14/run40/shard-0/x.pt", 4, 8), "v14/run40/shard-0/x.pt");
  EXPECT_EQ(ob::with_step("latest.pt", 4, 8), "latest.pt");
  EXPECT_EQ(ob::with_step("", 4, 8), "");
}

class TornSave : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp_{"observed"};
  void touch(const std::string& rel) {
    const auto p = tmp_.path() / rel;
    stdfs::create_directories(p.parent_path());
    std::ofstream(p) << rel;
  }
};

TEST_F(TornSave, NamesWhatTheKillLeftAndWhatItLacks) {
  for (const char* f : {"step_4/model.pt", "step_4/optimizer.pt", "step_4/DONE", "step_8/model.pt", ".anchor.lock"})
    touch(f);
  const auto t = ob::torn_save(tmp_.path().string(), {"step_4/model.pt", "step_4/optimizer.pt", "step_4/DONE"},
                               {"step_4/DONE", "step_4/model.pt", "step_4/optimizer.pt"}, 4, 8);
  EXPECT_EQ(t.step, 8);
  EXPECT_EQ(t.files, std::vector<std::string>({"step_8/model.pt"}));  // anchor's lock is not the program's
  EXPECT_EQ(t.missing, std::vector<std::string>({"step_8/DONE", "step_8/optimizer.pt"}));
  EXPECT_EQ(t.summary(), "step 8: 1 file written, 2 missing");
  EXPECT_EQ(t.words(4),
            "it holds step_8/model.pt (15 bytes) and lacks step_8/DONE, step_8/optimizer.pt (which your save of step 4 "
            "wrote)");
  EXPECT_TRUE(t.named_in("FileNotFoundError: '/x/checkpoints/step_8/optimizer.pt'"));
  EXPECT_FALSE(t.named_in("FileNotFoundError: '/x/checkpoints/step_4/optimizer.pt'"));
  EXPECT_TRUE(t.named_in("ValueError: Can't find a valid checkpoint at /x/checkpoints/step_8"));  // its directory
  EXPECT_FALSE(t.named_in("ValueError: Can't find a valid checkpoint at /x/checkpoints/step_80"));
  EXPECT_FALSE(t.named_in("ValueError: Can't find a valid checkpoint at /x/checkpoints/xstep_8"));
}

TEST_F(TornSave, ASaveThatOverwritesOneFileLacksNothing) {
  touch("latest.pt");
  const auto t = ob::torn_save(tmp_.path().string(), {"latest.pt"}, {"latest.pt"}, 4, 8);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.words(4), "it holds no file");
}

TEST_F(TornSave, AFinishedSaveIsPinnedByDigest) {
  touch("s/a");
  const auto j = ob::hashed_save(tmp_.path().string(), 4, {"s/a"}).to_json();
  EXPECT_EQ(j["step"], 4);
  EXPECT_EQ(j["files"][0]["path"], "s/a");
  EXPECT_EQ(j["files"][0]["bytes"], 3);
  // sha256("s/a")
  EXPECT_EQ(j["files"][0]["sha256"], "51b369cc0a639a242a2ac6ba8b05c225c669d0e21f44b079af43148ef0fca8ca");
}

}  // namespace
