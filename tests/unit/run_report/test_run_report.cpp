// RunReport (include/anchor/run_report/run_report.hpp): report.json as one
// typed document, read and written back exactly, whatever the report holds.
// Every e2e test that reads a report.json also checks it round-trips
// (tests/support/run_anchor.hpp, read_json).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "anchor/run_report/run_report.hpp"

namespace {

using anchor::run_report::RunReport;
using nlohmann::json;

std::string round_trip(const json& j) { return RunReport::from_json(j).to_json().dump(); }

// A report with a section of every kind the views read, as a pilot writes it.
json full_report() {
  const json step0 = {{"step", 0},        {"loss", 5.5},   {"grad_norm", 1.25},
                      {"lr", 1e-4},       {"tokens", 512}, {"data_wait_s", 0.01},
                      {"compute_s", 0.2}, {"comm_s", 0.0}, {"batch_digest", "ab"}};
  return {
      {"format", "anchor.report/v1"},
      {"run_id", "pilot-1"},
      {"created_at", "2026-12-06T07:00:00Z"},
      {"anchor", {{"version", "0.9.0"}, {"git_commit", "abc"}}},
      {"config", {{"train", {{"micro_batch", 2}}}}},
      {"status", "passed"},
      {"exit_code", 0},
      {"signed", true},
      {"signer_key_id", "k"},
      {"stages",
       json::array({{{"stage", "load"}, {"status", "passed"}, {"seconds", 0.5}, {"figures", {{"parameters", 120000}}}},
                    {{"stage", "kill"},
                     {"status", "passed"},
                     {"seconds", 0.1},
                     {"figures", {{"torn_checkpoints", json::array({"step-3.tmp-1"})}, {"signal", "SIGKILL"}}}},
                    {{"stage", "compare"}, {"status", "failed"}, {"error", "mismatch"}}})},
      {"steps", {{"train", json::array({step0})}, {"reference", json::array()}, {"resume", json::array({step0})}}},
      {"eval", {{"before_save", 5.25}, {"after_restore", 5.25}, {"perplexity", 190.5}}},
      {"resume",
       {{"verdict", "mismatch"},
        {"mode", "bitwise"},
        {"tolerance", 0.0},
        {"cause", json::array({"optimizer"})},
        {"diverged", json::array({"optimizer"})},
        {"checks", json::array({{{"name", "restored vs saved: optimizer"},
                                 {"ok", false},
                                 {"detail", "differs"},
                                 {"component", "optimizer"}}})},
        {"per_rank", json::array({{{"rank", 0}, {"verdict", "match"}, {"cause", json::array()}},
                                  {{"rank", 1}, {"verdict", "mismatch"}, {"cause", json::array({"optimizer"})}}})},
        {"saved_step", 2},
        {"restored_step", 2},
        {"state_digests", {{"saved", {{"model", "m"}, {"optimizer", "o"}, {"rng", "r"}, {"step", 2}}}}},
        {"state_digest_scheme", "anchor.state-digest/v2"}}},
      {"measurements",
       {{"step", {{"seconds", 0.21}, {"tokens", 512.0}, {"world_size", 2}, {"micro_batch", 2}}},
        {"memory",
         {{"source", "rss"},
          {"device_total_bytes", 80e9},
          {"stages", {{"train", {{"peak_allocated_bytes", 1000}, {"peak_rss_bytes", -1}}}}},
          {"points", json::array()}}},
        {"checkpoint_save", {{"bytes", 4096}, {"seconds", 0.01}, {"gb_per_s", 0.4}}}}},
      {"distributed", {{"strategy", "ddp"}, {"world_size", 2}, {"per_rank", json::array({{{"rank", 0}}})}}},
      {"checkpoints", json::array({{{"dir", "checkpoints/step-2"}, {"step", 2}, {"manifest_sha256", "h"}}})},
      {"plan", {{"why", "not planned"}}},
      {"reproduction", {{"verdict", "reproduced"}, {"differences", 0}, {"checks", json::array()}}}};
}

TEST(RunReport, AReportAsAPilotWritesItReadsTypedAndWritesBackTheSameBytes) {
  const json j = full_report();
  const RunReport r = RunReport::from_json(j);
  EXPECT_EQ(r.to_json().dump(), j.dump());
  EXPECT_EQ(r.to_json().dump(2), j.dump(2)) << "report.json is written with an indent of 2";

  // What the views read is typed.
  ASSERT_TRUE(r.stages && r.stages->size() == 3);
  EXPECT_EQ((*r.stages)[0].seconds, 0.5);
  EXPECT_EQ((*r.stages)[0].figures->parameters, 120000);
  EXPECT_EQ((*r.stages)[1].figures->torn_checkpoints->size(), 1u);
  EXPECT_EQ((*r.stages)[2].error, "mismatch");
  EXPECT_FALSE((*r.stages)[2].seconds) << "a stage without a time has none";
  ASSERT_TRUE(r.resume && r.resume->per_rank);
  EXPECT_EQ((*r.resume->per_rank)[1].cause, std::vector<std::string>{"optimizer"});
  EXPECT_EQ(r.resume->state_digests->at("saved").optimizer, "o");
  EXPECT_EQ(r.measurements->step->tokens, 512) << "a program's median token count, 512.0, is a count";
  EXPECT_EQ(r.measurements->memory->device_total_bytes, 80000000000);
  EXPECT_EQ(r.measurements->memory->stages->at("train").peak_rss_bytes, -1);
  EXPECT_EQ(r.is_signed, true);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.reproduction->differences, 0);

  // What a struct does not model is kept as read.
  EXPECT_EQ((*r.stages)[1].figures->keys.at("signal"), "SIGKILL");
  EXPECT_EQ(r.resume->state_digests->at("saved").keys.at("step"), 2);
  EXPECT_TRUE(r.measurements->memory->points && r.measurements->memory->points->empty());
  EXPECT_EQ(r.measurements->step->keys.at("tokens"), 512.0) << "kept as written: a float";
}

// Negative control: the writer writes the typed fields, not a copy of what was read.
TEST(RunReport, WhatIsChangedInTheStructIsWhatIsWritten) {
  RunReport r = RunReport::from_json(full_report());
  r.status = "failed";
  (*r.stages)[0].seconds = 1.5;
  r.resume->per_rank->at(1).verdict = "match";
  r.eval.reset();
  const json out = r.to_json();
  EXPECT_EQ(out["status"], "failed");
  EXPECT_EQ(out["stages"][0]["seconds"], 1.5);
  EXPECT_EQ(out["resume"]["per_rank"][1]["verdict"], "match");
  EXPECT_FALSE(out.contains("eval"));
  EXPECT_NE(out.dump(), full_report().dump());
}

// A hand-edited, older or hostile report: values of another type than the
// field's stay as they were, numbers keep their JSON type, and nothing throws.
TEST(RunReport, ValuesOfAnotherTypeAndNumbersOfTheOtherKindAreKeptAsRead) {
  json j = full_report();
  j["stages"][0]["seconds"] = "slow";
  j["stages"][1]["figures"]["memory"] = 7;
  j["steps"]["reference"] = "not a list";
  j["steps"]["train"][0]["loss"] = nullptr;
  j["steps"]["train"][0]["step"] = 0.0;
  j["eval"]["before_save"] = 5;                         // an integer in a float field
  j["checkpoints"][0]["step"] = 18446744073709551615u;  // past int64
  j["resume"]["per_rank"][0] = "rank zero";             // one element that is not an object
  j["exit_code"] = -1;
  j["signed"] = "yes";
  j["extra"] = {{"future", json::array({1, 2.5, "x", nullptr, true})}};
  const RunReport r = RunReport::from_json(j);
  EXPECT_EQ(r.to_json().dump(), j.dump());
  EXPECT_FALSE((*r.stages)[0].seconds);
  EXPECT_FALSE(r.steps->reference);
  EXPECT_FALSE(r.is_signed);
  EXPECT_EQ(r.eval->before_save, 5.0) << "read as a number";
  EXPECT_FALSE(r.resume->per_rank) << "a list with a bad element is not read in part";
  EXPECT_EQ(r.exit_code, -1);

  for (const json& odd : {json::array({1, 2}), json("report"), json(), json(3)})
    EXPECT_NO_THROW(RunReport::from_json(odd)) << odd.dump();
  EXPECT_EQ(round_trip(json::object()), "{}");
}

// The pointers of every value in a document, containers included.
void pointers(const json& j, const std::string& at, std::vector<std::string>& out) {
  out.push_back(at);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) pointers(v, at + "/" + k, out);
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) pointers(j[i], at + "/" + std::to_string(i), out);
}

// A pilot's report with values replaced at random places by values of every
// type (and, in objects, keys of the report's own names added): each reads
// and writes back to the same bytes.
TEST(RunReport, ReportsWithRandomValuesAtRandomPlacesRoundTrip) {
  const std::vector<std::string> keys = {"stage",    "seconds", "figures", "step",  "loss",  "lr",     "checks", "ok",
                                         "per_rank", "cause",   "rank",    "model", "bytes", "tokens", "other"};
  std::mt19937 gen(20261206);
  const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(gen); };
  std::function<json(int)> value = [&](int depth) -> json {
    switch (pick(depth > 2 ? 7 : 9)) {
      case 0: return nullptr;
      case 1: return pick(2) == 0;
      case 2: return static_cast<std::int64_t>(pick(1000)) - 500;
      case 3: return static_cast<double>(pick(1000)) / 8.0;
      case 4: return std::to_string(pick(100));
      case 5: return static_cast<double>(pick(50));  // an integral float
      case 6: return 18446744073709551615u;          // past int64
      case 7: {
        json a = json::array();
        for (std::size_t i = pick(3); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (std::size_t i = pick(4); i > 0; --i) o[keys[pick(keys.size())]] = value(depth + 1);
        return o;
      }
    }
  };
  const json base = full_report();
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    json doc = base;
    for (std::size_t n = 1 + pick(3); n > 0; --n) {
      std::vector<std::string> at;
      pointers(doc, "", at);
      const std::string where = at[pick(at.size())];
      if (where.empty()) continue;
      json& target = doc[json::json_pointer(where)];
      if (target.is_object() && pick(2) == 0)
        target[keys[pick(keys.size())]] = value(1);
      else
        target = value(1);
    }
    ASSERT_EQ(round_trip(doc), doc.dump()) << "document " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
}

}  // namespace
