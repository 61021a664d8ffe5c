// What a program printed at its saves against what the committed step pins
// (include/anchor/protocol/saved_vs_reported.hpp): every contradiction has a
// case, and each case its negative (the same save, printed truly, passes).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "anchor/error.hpp"
#include "anchor/protocol/saved_vs_reported.hpp"

namespace pp = anchor::protocol;
using nlohmann::json;

namespace {

const std::string kModel(64, 'a'), kOpt(64, 'b'), kData0(64, 'c'), kData1(64, 'd'), kOther(64, 'e');

// Step 6 of two ranks: model and optimizer written by rank 0, data per rank.
pp::PinnedStep two_ranks() {
  const json state = {{"format", pp::kHelperStateFormat},
                      {"components",
                       {{"model", {"model.safetensors"}},
                        {"optimizer", {"optimizer.safetensors"}},
                        {"data", {"data-rank00000-of-00002.safetensors", "data-rank00001-of-00002.safetensors"}}}}};
  const json manifest = {{"format", 1},
                         {"step", 6},
                         {"files",
                          {{{"path", "model.safetensors"}, {"size", 1}, {"sha256", kModel}},
                           {{"path", "optimizer.safetensors"}, {"size", 1}, {"sha256", kOpt}},
                           {{"path", "data-rank00000-of-00002.safetensors"}, {"size", 1}, {"sha256", kData0}},
                           {{"path", "data-rank00001-of-00002.safetensors"}, {"size", 1}, {"sha256", kData1}},
                           {{"path", "state.json"}, {"size", 1}, {"sha256", kOther}}}}};
  return pp::PinnedStep::from_json(6, "checkpoints/step-00000006", state, manifest);
}

pp::WorkerLog saved(int rank, const std::string& model, const std::string& opt, const std::string& data) {
  pp::WorkerLog w;
  w.add(pp::parse_event(R"({"type":"digests","rank":)" + std::to_string(rank) +
                        R"(,"time":1.5,"when":"save","step":6,"components":{"model":")" + model + R"(","optimizer":")" +
                        opt + R"(","data":")" + data + R"("}})"));
  return w;
}

pp::SaveCrossCheck check(const pp::PinnedStep& p, const pp::WorkerLog& r0, const pp::WorkerLog& r1) {
  return pp::cross_check_save("worker B", p, {{0, &r0}, {1, &r1}});
}

TEST(SavedVsReported, AProgramThatPrintsWhatItSavedHasNoContradiction) {
  const auto c = check(two_ranks(), saved(0, kModel, kOpt, kData0), saved(1, kModel, kOpt, kData1));
  EXPECT_TRUE(c.contradictions.empty());
  EXPECT_EQ(c.compared, 4);  // model, optimizer (rank 0's files) and each rank's data
  EXPECT_TRUE(c.not_checked.empty());
}

TEST(SavedVsReported, AnOptimizerPrintedFromAnotherRunIsNamed) {
  const auto c = check(two_ranks(), saved(0, kModel, kOther, kData0), saved(1, kModel, kOpt, kData1));
  ASSERT_EQ(c.contradictions.size(), 1U);
  EXPECT_EQ(c.contradictions[0].component, "optimizer");
  EXPECT_EQ(c.contradictions[0].file, "optimizer.safetensors");
  EXPECT_EQ(c.contradictions[0].words(),
            "worker B printed the optimizer at its save of step 6 as eeeeeeeeeeee, but the committed "
            "optimizer.safetensors is bbbbbbbbbbbb");
}

TEST(SavedVsReported, EachRankIsCheckedAgainstItsOwnFile) {
  // Rank 1 printed rank 0's data: its own file says otherwise. Rank 1's optimizer is not a file (rank 0 writes it).
  const auto c = check(two_ranks(), saved(0, kModel, kOpt, kData0), saved(1, kModel, kOther, kData0));
  ASSERT_EQ(c.contradictions.size(), 1U);
  EXPECT_EQ(c.contradictions[0].component, "data");
  EXPECT_EQ(c.contradictions[0].rank, 1);
  EXPECT_EQ(c.contradictions[0].file, "data-rank00001-of-00002.safetensors");
}

TEST(SavedVsReported, ARankThatPrintedNoSaveAndAComponentTheStepLacksAreContradictions) {
  pp::WorkerLog silent;  // rank 1 printed nothing at step 6: its data file was written by a save it did not report
  auto c = check(two_ranks(), saved(0, kModel, kOpt, kData0), silent);
  ASSERT_EQ(c.contradictions.size(), 1U);
  EXPECT_EQ(c.contradictions[0].words(),
            "worker B rank 1 printed no digest of the data at its save of step 6, which saved it as "
            "data-rank00001-of-00002.safetensors");
  pp::WorkerLog extra = saved(0, kModel, kOpt, kData0);
  extra.add(pp::parse_event(R"({"type":"digests","rank":0,"time":2,"when":"save","step":6,)"
                            R"("components":{"model":")" +
                            kModel + R"(","scaler":")" + kOther + R"("}})"));
  c = pp::cross_check_save("worker A", two_ranks(), {{0, &extra}});
  ASSERT_FALSE(c.contradictions.empty());
  EXPECT_EQ(c.contradictions.back().words(),
            "worker A printed a digest of the scaler at its save of step 6, which holds no such component");
}

TEST(SavedVsReported, ShardsThroughDcpAndPerTensorPinsAreSaidNotChecked) {
  const json state = {{"format", pp::kHelperStateFormat},
                      {"components", {{"model", {".metadata"}}, {"scheduler", {"scheduler.safetensors"}}}},
                      {"dcp", {"model"}}};
  const json manifest = {{"files",
                          {{{"path", ".metadata"}, {"size", 1}, {"sha256", kOther}},
                           {{"path", "scheduler.safetensors"}, {"size", 1}, {"tensors", json::object()}}}}};
  const auto p = pp::PinnedStep::from_json(3, "step-00000003", state, manifest);
  pp::WorkerLog w;
  w.add(pp::parse_event(R"({"type":"digests","rank":0,"time":1,"when":"save","step":3,"components":{"model":")" +
                        kModel + R"(","scheduler":")" + kModel + R"("}})"));
  const auto c = pp::cross_check_save("worker A", p, {{0, &w}});
  EXPECT_TRUE(c.contradictions.empty());
  EXPECT_EQ(c.compared, 0);
  EXPECT_EQ(c.not_checked.size(), 2U);
  EXPECT_EQ(c.not_checked[0], "model (sharded through DCP: each rank's digest is of its own shard)");
}

TEST(SavedVsReported, AStepNotSavedByTheHelperIsAClearError) {
  try {
    pp::PinnedStep::from_json(3, "step-00000003", json{{"format", pp::kHelperStateFormat}},
                              json{{"files", json::array()}});
    FAIL() << "expected an error";
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("step-00000003/state.json has no components: not a step anchor_pilot's"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pp::PinnedStep::from_json(
                   3, "d", json{{"format", pp::kHelperStateFormat}, {"components", {{"model", "model.safetensors"}}}},
                   json{{"files", json::array()}}),
               anchor::Error);  // a component's files are a list
}

TEST(SavedVsReported, AStepAnotherWriterMadeIsSaidNotChecked) {
  // anchor's own store (the fake program of the driver tests): its digests are the program's fingerprints.
  const auto p = pp::PinnedStep::from_json(6, "checkpoints/step-00000006", json{{"rng", "42"}, {"step", 6}},
                                           json{{"files", json::array()}});
  const auto c = check(p, saved(0, kModel, kOpt, kData0), saved(1, kModel, kOpt, kData1));
  EXPECT_TRUE(c.contradictions.empty());
  EXPECT_EQ(c.compared, 0);
  ASSERT_EQ(c.not_checked.size(), 1U);
  EXPECT_EQ(c.not_checked[0],
            "every component (checkpoints/step-00000006 was not written by anchor_pilot's Pilot.save: its state.json "
            "has format \"\", not \"anchor-pilot.state/v1\")");
  // The negative: the same step in the helper's format is checked, and the printed save contradicts it.
  const auto h = pp::PinnedStep::from_json(6, "checkpoints/step-00000006",
                                           json{{"format", pp::kHelperStateFormat}, {"components", {{"model", {"m"}}}}},
                                           json{{"files", {{{"path", "m"}, {"size", 1}, {"sha256", kOther}}}}});
  const auto hc = check(h, saved(0, kModel, kOpt, kData0), saved(1, kModel, kOpt, kData1));
  ASSERT_EQ(hc.contradictions.size(), 5U);  // rank 0's model; optimizer and data, on each rank, held by no file
  EXPECT_EQ(hc.contradictions[0].component, "model");
}

}  // namespace
