// The built-in worker's result file (include/anchor/protocol/worker_result.hpp):
// what the worker writes reads back the same, and read_worker_result refuses
// a file of another format, role or shape by naming the field; the typed
// resume comparison, with a negative control per kind of divergence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "anchor/error.hpp"
#include "anchor/protocol/compare.hpp"
#include "anchor/protocol/worker_result.hpp"
#include "support/made_up_records.hpp"

using anchor::Error;
using anchor::protocol::WorkerResult;
using nlohmann::json;

namespace {

using anchor::test::kDigestA;
using anchor::test::kDigestB;
using anchor::test::kDigestC;
const std::string& kA = kDigestA;
const std::string& kB = kDigestB;
const std::string& kC = kDigestC;

anchor::train::StepRecord step(std::int64_t s, double loss) { return anchor::test::made_up_step(s, loss); }

anchor::train::StateDigest digest(std::int64_t s, const std::string& opt = kB) {
  return anchor::test::made_up_digest(s, kA, opt);
}

WorkerResult reference() {
  WorkerResult r;
  r.role = "reference";
  r.pid = 42;
  r.stages = json::array({{{"stage", "train"}, {"status", "passed"}, {"seconds", 0.5}, {"figures", json::object()}}});
  r.start = {{"from", "init"}};
  r.model = {1000, 2, 2, 64, 256, 32, 6000.0, "builtin", "6N + attention", "manual"};
  r.train_steps = {step(0, 5.0), step(1, 4.9)};
  r.reference_steps = {step(2, 4.8), step(3, 4.7)};
  r.step_memory.tensors.allocated_bytes = 500;
  r.step_memory.tensors.peak_allocated_bytes = 900;
  r.step_memory.tensors.source = "counting_allocator";
  r.step_memory.process = {1 << 20, 2 << 20};
  r.state_bytes = {4000, 4000, 8000};
  r.matmul_flops = 1e10;
  r.saved_step = 2;
  r.saved_state = digest(2);
  r.eval_loss = 4.85;
  r.final_state = digest(4);
  return r;
}

WorkerResult resume() {
  WorkerResult r;
  r.role = "resume";
  r.pid = 43;
  r.restored_step = 2;
  r.restored_dir = "/c/step-00000002";
  r.skipped = {{"/c/step-00000004.tmp-1", "temporary directory of an unfinished save"}};
  r.restored_state = digest(2);
  r.rng_restore = json::object();
  r.resume_steps = {step(2, 4.8), step(3, 4.7)};
  r.eval_loss = 4.85;
  r.final_state = digest(4);
  return r;
}

struct TempFile {
  std::string path = std::filesystem::temp_directory_path() / ("anchor-wr-" + std::to_string(::getpid()) + ".json");
  ~TempFile() { std::filesystem::remove(path); }
  const std::string& write(const std::string& text) {
    std::ofstream(path) << text;
    return path;
  }
};

// read_worker_result's message for `doc` as `role`; "" when it reads.
std::string refusal(const json& doc, const std::string& role = "reference") {
  TempFile f;
  try {
    anchor::protocol::read_worker_result(f.write(doc.dump()), role);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(WorkerResult, EveryRoleReadsBackAsWritten) {
  WorkerResult probe;
  probe.role = "probe";
  probe.pid = 44;
  probe.memory_points = {{4, 64, 1000, -1, {1, 1, 2}, "probe", 0.25}, {1, 32, 300, 512, {1, 1, 2}, "probe", {}}};
  for (const WorkerResult& r : {reference(), resume(), probe}) {
    const json written = r.to_json();
    EXPECT_EQ(written["format"], "anchor.worker-result/v1");
    EXPECT_EQ(WorkerResult::from_json(written).to_json(), written) << r.role;
    TempFile f;
    EXPECT_EQ(anchor::protocol::read_worker_result(f.write(written.dump()), r.role).to_json(), written);
  }
  // Several ranks: rank, world and backend travel; one rank writes none of them.
  WorkerResult r1 = reference();
  r1.rank = 1;
  r1.world_size = 2;
  r1.backend = "gloo";
  const auto back = WorkerResult::from_json(r1.to_json());
  EXPECT_EQ(std::make_tuple(back.rank, back.world_size, back.backend), std::make_tuple(1, 2, std::string("gloo")));
  EXPECT_FALSE(reference().to_json().contains("rank"));
  // The typed sections, field by field.
  const auto ref = WorkerResult::from_json(reference().to_json());
  EXPECT_EQ(std::make_tuple(ref.model.parameters, ref.model.n_embd, ref.model.flops_per_token, ref.model.attention),
            std::make_tuple(std::int64_t{1000}, std::int64_t{64}, 6000.0, std::string("manual")));
  EXPECT_EQ(std::make_tuple(ref.step_memory.tensors.peak_allocated_bytes, ref.step_memory.tensors.reserved_bytes,
                            ref.step_memory.process.hwm_bytes),
            std::make_tuple(std::int64_t{900}, std::int64_t{-1}, std::uint64_t{2} << 20))
      << "a CPU reading has no reserved bytes";
  const auto res = WorkerResult::from_json(resume().to_json());
  ASSERT_EQ(res.skipped.size(), 1u);
  EXPECT_EQ(res.skipped[0].reason, "temporary directory of an unfinished save");
  const auto pr = WorkerResult::from_json(probe.to_json());
  ASSERT_EQ(pr.memory_points.size(), 2u);
  EXPECT_EQ(pr.memory_points[1].peak_reserved_bytes, 512);
  EXPECT_FALSE(pr.memory_points[1].seconds.has_value());
}

TEST(WorkerResult, ARefusedFileNamesTheField) {
  const json good = reference().to_json();
  EXPECT_EQ(refusal(good), "");

  json v = good;
  v["format"] = "anchor.worker-result/v2";
  EXPECT_NE(refusal(v).find("format is \"anchor.worker-result/v2\"; this anchor reads \"anchor.worker-result/v1\""),
            std::string::npos);
  v = good;
  v.erase("saved_state");
  EXPECT_NE(refusal(v).find("saved_state is missing"), std::string::npos) << refusal(v);
  v = good;
  v["train_steps"][1]["loss"] = "4.9";
  EXPECT_NE(refusal(v).find("train_steps[1].loss is \"4.9\", expected a finite number"), std::string::npos)
      << refusal(v);
  v = good;
  v["final_state"]["step"] = 18446744073709551615ull;
  EXPECT_NE(refusal(v).find("final_state.step is 18446744073709551615, expected an integer below 2^63"),
            std::string::npos)
      << refusal(v);
  v = good;
  v["eval_loss"] = nullptr;  // how JSON carries a NaN
  EXPECT_NE(refusal(v).find("eval_loss is null"), std::string::npos) << refusal(v);
  v = good;
  v["train_steps"] = json::array();
  EXPECT_NE(refusal(v).find("train_steps is empty"), std::string::npos);
  v = good;
  v["stages"][0].erase("figures");
  EXPECT_NE(refusal(v).find("stages[0].figures is missing"), std::string::npos) << refusal(v);
  v = good;
  v["model"].erase("n_embd");
  EXPECT_NE(refusal(v).find("model.n_embd is missing"), std::string::npos) << refusal(v);
  v = good;
  v["step_memory"]["peak_allocated_bytes"] = -5;
  EXPECT_NE(refusal(v).find("step_memory.peak_allocated_bytes is -5, not a byte count"), std::string::npos)
      << refusal(v);
  v = good;
  v["rank"] = 2;
  v["world_size"] = 2;
  v["backend"] = "gloo";
  EXPECT_NE(refusal(v).find("rank 2 of world_size 2"), std::string::npos) << refusal(v);
  WorkerResult probe;
  probe.role = "probe";
  probe.pid = 44;
  probe.memory_points = {{4, 64, 1000, -1, {1, 1, 2}, "probe", {}}};
  json pj = probe.to_json();
  EXPECT_EQ(refusal(pj, "probe"), "");
  pj["memory_points"][0]["from"] = "guess";
  EXPECT_NE(refusal(pj, "probe").find("memory_points[0].from is \"guess\", expected reference or probe"),
            std::string::npos)
      << refusal(pj, "probe");
  pj["memory_points"][0]["micro_batch"] = 0;
  EXPECT_NE(refusal(pj, "probe").find("not a shape"), std::string::npos) << refusal(pj, "probe");
  // Another role's file, and not JSON at all: the path is in the message.
  EXPECT_NE(refusal(good, "resume").find("is the reference worker's, expected the resume worker's"), std::string::npos);
  TempFile f;
  try {
    anchor::protocol::read_worker_result(f.write("{\"format\": "), "reference");
    FAIL() << "a truncated file read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path + " is not JSON"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("same build"), std::string::npos);
  }
}

TEST(WorkerResult, TheComparisonMatchesAndNamesWhatDiverged) {
  const auto v = anchor::protocol::compare_resume(reference(), resume(), 0.0).to_json();
  EXPECT_EQ(v["verdict"], "match") << v.dump(2);

  // Negative controls: the optimizer restored wrongly, the data cursor, the loss.
  WorkerResult bad = resume();
  bad.restored_state = digest(2, kC);
  auto m = anchor::protocol::compare_resume(reference(), bad, 0.0).to_json();
  EXPECT_EQ(m["verdict"], "mismatch");
  EXPECT_EQ(m["cause"], json::array({"optimizer"}));
  EXPECT_NE(m.dump().find("differs in: wte.weight.exp_avg"), std::string::npos) << m.dump(2);

  bad = resume();
  bad.resume_steps[1].batch_digest = kB;
  m = anchor::protocol::compare_resume(reference(), bad, 0.0).to_json();
  EXPECT_EQ(m["cause"], json::array({"data_cursor"}));

  bad = resume();
  bad.resume_steps[0].loss = 4.8000001;
  EXPECT_EQ(anchor::protocol::compare_resume(reference(), bad, 0.0).to_json()["cause"], json::array({"loss"}));
  EXPECT_EQ(anchor::protocol::compare_resume(reference(), bad, 1e-6).to_json()["verdict"], "match")
      << "within the tolerance";
}

// One tolerance rule for both kinds of worker (compare.hpp).
TEST(Verdict, OneToleranceRule) {
  using anchor::protocol::within_tolerance;
  EXPECT_TRUE(within_tolerance(1.5, 1.5, 0));
  EXPECT_FALSE(within_tolerance(1.5, 1.5000001, 0)) << "bitwise";
  EXPECT_TRUE(within_tolerance(0.0, -0.0, 0));
  EXPECT_TRUE(within_tolerance(1.5, 1.5000001, 1e-6));
  EXPECT_FALSE(within_tolerance(1.5, 1.6, 1e-6));
  EXPECT_TRUE(within_tolerance(0.0, 1e-20, 1e-6)) << "the floor keeps a zero from asking for bitwise equality";
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(within_tolerance(inf, inf, 1e-6));
  EXPECT_FALSE(within_tolerance(inf, 1e300, 1e-6)) << "an infinity is close to nothing finite";
  EXPECT_FALSE(within_tolerance(inf, -inf, 1e-6));
}

// Several ranks: rank 0's verdict, with every other rank's failures in it, named.
TEST(Verdict, OverRanksNamesTheRankThatDiverged) {
  using anchor::protocol::compare_resume;
  const auto good = compare_resume(reference(), resume(), 0.0);
  WorkerResult bad = resume();
  bad.restored_state = digest(2, kC);
  const auto wrong = compare_resume(reference(), bad, 0.0);

  const json all_good = anchor::protocol::RankVerdicts({good, good}).to_json();
  EXPECT_EQ(all_good["verdict"], "match") << all_good.dump(2);
  ASSERT_EQ(all_good["per_rank"].size(), 2u);
  EXPECT_EQ(all_good["per_rank"][1]["rank"], 1);
  EXPECT_EQ(all_good["checks"].size(), good.checks.size()) << "rank 0's checks only, when the others match";

  const json one_bad = anchor::protocol::RankVerdicts({good, wrong}).to_json();
  EXPECT_EQ(one_bad["verdict"], "mismatch");
  EXPECT_EQ(one_bad["cause"], json::array({"rank 1: optimizer"}));
  EXPECT_EQ(one_bad["diverged"], json::array({"rank 1: optimizer"})) << "everything that differed, on any rank";
  EXPECT_EQ(one_bad["per_rank"][0]["verdict"], "match");
  EXPECT_EQ(one_bad["per_rank"][1]["cause"], json::array({"optimizer"}));
  bool named = false;
  for (const auto& c : one_bad["checks"])
    if (c["name"] == "rank 1: restored vs saved: optimizer state" && c["ok"] == false && c["component"] == "optimizer")
      named = true;
  EXPECT_TRUE(named) << one_bad["checks"].dump(2);

  // The drivers read the same verdict typed.
  const anchor::protocol::RankVerdicts typed({good, wrong});
  EXPECT_FALSE(typed.match());
  EXPECT_TRUE(anchor::protocol::RankVerdicts({good, good}).match());
  EXPECT_EQ(typed.combined.cause, std::vector<std::string>{"rank 1: optimizer"});
  EXPECT_EQ(typed.to_json(), one_bad);

  const json rank0_bad = anchor::protocol::RankVerdicts({wrong}).to_json();
  EXPECT_EQ(rank0_bad["cause"], json::array({"optimizer"}));
  EXPECT_EQ(rank0_bad["saved_step"], 2);
}
