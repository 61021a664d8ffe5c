// Plan arithmetic on hand-worked examples: communication volume, Young/Daly,
// the budget and its term, and make_plan's decisions on a synthetic report.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "anchor/error.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/run_report/plan_inputs.hpp"
#include "synthetic_report.hpp"

namespace {

using namespace anchor::plan;
using nlohmann::json;

// The plan's inputs and the plan of a report as report.json holds it.
Measured measured_from_report(const json& report) {
  return anchor::run_report::measured_from_report(anchor::run_report::RunReport::from_json(report));
}
json make_plan(const json& report, const Catalog& catalog, const anchor::config::Config& cfg) {
  return anchor::plan::make_plan(measured_from_report(report), catalog, cfg);
}

// ---------------------------------------------------------------- comm volume

TEST(CommVolume, DdpAndZeroStagesOnEightRanks) {
  const double g = 8e9;
  // Ring all-reduce: 2 (n-1)/n G = 2 * 7/8 * 8e9.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(0, 8, 1, g, 1), 14e9);
  // ZeRO-1 and ZeRO-2 (grad_accum 1): reduce-scatter + all-gather, the same volume.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(1, 8, 8, g, 1), 14e9);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(2, 8, 8, g, 1), 14e9);
  // ZeRO-3: +50%.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(3, 8, 8, g, 1), 21e9);
  // Accumulation: DDP and ZeRO-1 reduce once per step; ZeRO-2 reduce-scatters
  // every micro-step; ZeRO-3 gathers and reduce-scatters every micro-step.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(0, 8, 1, g, 4), 14e9);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(1, 8, 8, g, 4), 14e9);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(2, 8, 8, g, 4), 4 * 7e9 + 7e9);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(3, 8, 8, g, 2), 42e9);
  // One rank: nothing to send.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(0, 1, 1, g, 1), 0.0);
}

TEST(CommVolume, HybridShardingAddsTheReplicaAllReduce) {
  const double g = 8e9;
  // Shard over 4, replicate over 2: 2*3/4*G + 2*(1/2)*G/4.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(1, 8, 4, g, 1), 12e9 + 2e9);
  // Negative control: full-degree sharding has no replica term.
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(1, 8, 8, g, 1), 14e9);
  EXPECT_THROW(comm_bytes_per_step(1, 8, 3, g, 1), anchor::Error);
  EXPECT_THROW(comm_bytes_per_step(4, 8, 8, g, 1), anchor::Error);
  EXPECT_THROW(comm_bytes_per_step(0, 0, 1, g, 1), anchor::Error);
}

// ----------------------------------------------------------------- Young/Daly

TEST(YoungDaly, IntervalForGivenNumbers) {
  // sqrt(2 * 60 s * 86400 s) = sqrt(10368000) = 3219.937...
  EXPECT_NEAR(young_daly_interval_s(60, 86400), 3219.9378876, 1e-6);
  // Four times the save cost doubles the interval.
  EXPECT_NEAR(young_daly_interval_s(240, 86400), 2 * 3219.9378876, 1e-6);
  EXPECT_TRUE(std::isinf(young_daly_interval_s(60, std::numeric_limits<double>::infinity())));
}

// --------------------------------------------------------------------- budget

double item_hours(const json& b, const std::string& name) {
  for (const auto& i : b["items"])
    if (i["name"] == name) return i["hours"].get<double>();
  ADD_FAILURE() << "no item " << name;
  return -1;
}

BudgetInput base_budget() {
  BudgetInput in;
  in.world = 8;
  in.nodes = 1;
  in.steps = 10000;
  in.compute_s_per_step = 0.5;  // 5000 s of training
  in.save_s = 60;
  in.download_gb = 100;  // 800 Gbit at 1 Gbit/s = 800 s
  in.ingress_gbps = 1;
  in.egress_gbps = 1;
  in.margin = 0.2;
  in.price_7_day = 2.0;
  in.price_30_day = 1.5;
  return in;
}

TEST(Budget, NoFailuresHandWorked) {
  json b = make_budget(base_budget());
  EXPECT_NEAR(item_hours(b, "download"), 800.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "training_steps"), 5000.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "checkpoints"), 60.0 / 3600, 1e-12);  // one save: no failures
  EXPECT_EQ(item_hours(b, "restarts"), 0.0);
  EXPECT_NEAR(b["hours"].get<double>(), 5860.0 / 3600, 1e-12);
  EXPECT_NEAR(b["days"].get<double>(), 5860.0 * 1.2 / 86400, 1e-12);
  EXPECT_EQ(b["term"], "7-day");
  EXPECT_DOUBLE_EQ(b["cost_7_day"].get<double>(), 8 * 168 * 2.0);   // 2688
  EXPECT_DOUBLE_EQ(b["cost_30_day"].get<double>(), 8 * 720 * 1.5);  // 8640
  EXPECT_EQ(b["cheaper_term"], "7-day");
  EXPECT_TRUE(b["checkpoint_interval_s"].is_null());
}

TEST(Budget, FailuresGiveYoungDalyCheckpointsAndRestarts) {
  BudgetInput in = base_budget();
  in.failures_per_day = 1;
  in.nodes = 2;  // cluster MTBF = 86400 / 2 = 43200 s
  in.restart_minutes = 10;
  json b = make_budget(in);
  const double tau = std::sqrt(2 * 60.0 * 43200);  // 2276.84 s
  EXPECT_NEAR(b["checkpoint_interval_s"].get<double>(), tau, 1e-9);
  EXPECT_NEAR(b["mtbf_hours"].get<double>(), 12.0, 1e-12);
  EXPECT_EQ(b["checkpoints"].get<double>(), 3.0);  // ceil(5000 / 2276.84)
  EXPECT_NEAR(item_hours(b, "checkpoints"), 180.0 / 3600, 1e-12);
  const double restarts = (5000.0 + 180.0) / 86400 * 1 * 2;
  EXPECT_NEAR(b["expected_restarts"].get<double>(), restarts, 1e-12);
  EXPECT_NEAR(item_hours(b, "restarts"), restarts * (600 + tau / 2) / 3600, 1e-12);
}

TEST(Budget, TermBoundariesAndCosts) {
  EXPECT_EQ(term_for_days(7.0), "7-day");
  EXPECT_EQ(term_for_days(7.01), "30-day");
  EXPECT_EQ(term_for_days(30.0), "30-day");
  EXPECT_EQ(term_for_days(30.01), "longer than 30 days");

  // 20 days of training (no margin): three 7-day terms or one 30-day term.
  BudgetInput in = base_budget();
  in.download_gb = 0;
  in.save_s = 0;
  in.margin = 0;
  in.steps = 20 * 86400;
  in.compute_s_per_step = 1.0;
  json b = make_budget(in);
  EXPECT_NEAR(b["days"].get<double>(), 20.0, 1e-9);
  EXPECT_EQ(b["term"], "30-day");
  EXPECT_EQ(b["terms_7_day"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(b["cost_7_day"].get<double>(), 8 * 168 * 3 * 2.0);  // 8064
  EXPECT_DOUBLE_EQ(b["cost_30_day"].get<double>(), 8 * 720 * 1.5);     // 8640
  EXPECT_EQ(b["cheaper_term"], "7-day");

  // 45 days: longer than 30, two 30-day terms, and it says so.
  in.steps = 45 * 86400;
  json c = make_budget(in);
  EXPECT_EQ(c["term"], "longer than 30 days");
  EXPECT_EQ(c["terms_30_day"].get<double>(), 2.0);
  EXPECT_NE(c["note"].get<std::string>().find("longer than 30 days"), std::string::npos);
  EXPECT_EQ(c["cheaper_term"], "30-day");  // 7 weeks x 2.0 > 60 days x 1.5
}

// Prices both ways: the GPU-hours used on demand against whole terms, the
// cheapest offered named; a 30-day term only when the run's length and a
// margin are estimated.
TEST(Budget, OnDemandAgainstTermsTheCheapestOfferedIsNamed) {
  BudgetInput in = base_budget();  // 5860 s x 1.2 margin on 8 GPUs: 15.63 GPU-hours
  in.price_on_demand = 3.0;
  json b = make_budget(in);
  const double gpu_hours = 8 * 5860.0 * 1.2 / 3600;
  EXPECT_NEAR(b["cost_on_demand"].get<double>(), gpu_hours * 3.0, 1e-9);  // 46.9, against 2688 for a 7-day term
  EXPECT_EQ(b["pricing"], "on-demand");
  EXPECT_NEAR(b["cost"].get<double>(), gpu_hours * 3.0, 1e-9);
  EXPECT_NE(b["pricing_why"].get<std::string>().find("15.6 GPU-hours on demand (7-day 2688, 30-day 8640)"),
            std::string::npos)
      << b["pricing_why"];

  // 20 days on 8 GPUs: on demand 3840 GPU-hours x 3.0 = 11520; three 7-day terms 8064; one 30-day term 8640.
  in.download_gb = 0;
  in.save_s = 0;
  in.steps = 20 * 86400 / 1.2;
  in.compute_s_per_step = 1.0;
  b = make_budget(in);
  EXPECT_EQ(b["pricing"], "7-day");
  EXPECT_DOUBLE_EQ(b["cost"].get<double>(), 8 * 168 * 3 * 2.0);
  in.price_30_day = 1.3;  // 7488: now the 30-day term is cheapest
  b = make_budget(in);
  EXPECT_EQ(b["pricing"], "30-day");
  EXPECT_DOUBLE_EQ(b["cost"].get<double>(), 8 * 720 * 1.3);
  // Without the run's length, or without a margin, no 30-day term is offered.
  in.work_estimated = false;
  b = make_budget(in);
  EXPECT_EQ(b["pricing"], "7-day");
  EXPECT_NE(b["pricing_why"].get<std::string>().find("compatibility and profiling pass"), std::string::npos);
  in.work_estimated = true;
  in.margin = 0;
  EXPECT_NE(make_budget(in)["pricing_why"].get<std::string>().find("budget.margin is 0"), std::string::npos);
  EXPECT_EQ(make_budget(in)["pricing"], "7-day");
  // A catalog with no on-demand price: terms only, and it says so.
  in.margin = 0.2;
  in.price_on_demand = 0;
  b = make_budget(in);
  EXPECT_TRUE(b["cost_on_demand"].is_null());
  EXPECT_EQ(b["pricing"], "30-day");
  EXPECT_NE(b["pricing_why"].get<std::string>().find("no on-demand price"), std::string::npos);
}

TEST(Budget, MarginAndTransfers) {
  BudgetInput in = base_budget();
  in.export_gb = 50;  // 400 Gbit at 2 Gbit/s = 200 s
  in.egress_gbps = 2;
  in.checkpoint_bytes = 10e9;  // final checkpoint copied off: 80 Gbit / 2 = 40 s
  in.preprocess_hours = 1;
  json b = make_budget(in);
  EXPECT_NEAR(item_hours(b, "export"), 200.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "copy_off_node"), 40.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "preprocess"), 1.0, 1e-12);
  EXPECT_NEAR(b["days"].get<double>(), b["days_without_margin"].get<double>() * 1.2, 1e-12);
  for (const auto& it : b["items"]) {
    if (it["name"] == "export" || it["name"] == "copy_off_node") {
      EXPECT_NE(it["detail"].get<std::string>().find("2.00 Gbit/s (budget.egress_gbps, assumed)"), std::string::npos)
          << it.dump();
    }
  }
  // A measured copy_off rate (export.copy_to) replaces the assumed one, and says so.
  in.egress_measured_gbps = 8;  // 400 Gbit / 8 = 50 s; 80 Gbit / 8 = 10 s
  b = make_budget(in);
  EXPECT_NEAR(item_hours(b, "export"), 50.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "copy_off_node"), 10.0 / 3600, 1e-12);
  for (const auto& it : b["items"]) {
    if (it["name"] == "export" || it["name"] == "copy_off_node") {
      EXPECT_NE(it["detail"].get<std::string>().find("8.00 Gbit/s (measured: the pilot's copy_off"), std::string::npos)
          << it.dump();
    }
  }
}

// The download and preprocess commands timed on a sample replace the assumed
// ingress rate and preprocess hours: budget.download_gb at the measured rate.
TEST(Budget, TimedPipelineCommandsReplaceTheAssumedFigures) {
  BudgetInput in = base_budget();
  in.download_gb = 100;  // 800 Gbit at 10 Gbit/s = 80 s assumed
  in.ingress_gbps = 10;
  in.preprocess_hours = 2;
  json b = make_budget(in);
  EXPECT_NEAR(item_hours(b, "download"), 80.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "preprocess"), 2.0, 1e-12);
  const auto detail = [&](const char* name) {
    for (const auto& it : b["items"])
      if (it["name"] == name) return it["detail"].get<std::string>();
    return std::string();
  };
  EXPECT_NE(detail("download").find("(budget.ingress_gbps, ASSUMED"), std::string::npos) << detail("download");
  EXPECT_NE(detail("preprocess").find("budget.preprocess_hours (ASSUMED"), std::string::npos);
  // 50 MB/s measured on a 5 MB sample: 100 GB in 2000 s; preprocess at 20 MB/s: 5000 s.
  in.download_measured_bytes_per_s = 50e6;
  in.download_sample_bytes = 5e6;
  in.preprocess_measured_bytes_per_s = 20e6;
  in.preprocess_sample_bytes = 5e6;
  b = make_budget(in);
  EXPECT_NEAR(item_hours(b, "download"), 2000.0 / 3600, 1e-12);
  EXPECT_NEAR(item_hours(b, "preprocess"), 5000.0 / 3600, 1e-12);
  EXPECT_NE(detail("download").find("100.0 GB at 50.00 MB/s (MEASURED: budget.download_command on a 5.000 MB sample"),
            std::string::npos)
      << detail("download");
  EXPECT_NE(detail("preprocess").find("at 20.00 MB/s (MEASURED: budget.preprocess_command"), std::string::npos);
  // Measured, but no size to extrapolate to: nothing counted, and it says what is missing.
  in.download_gb = 0;
  b = make_budget(in);
  EXPECT_EQ(item_hours(b, "download"), 0.0);
  EXPECT_NE(detail("download").find("budget.download_gb is 0"), std::string::npos) << detail("download");
}

// ------------------------------------------------------------------ make_plan

// Devices sized around the synthetic report's peaks (headroom 0, 8 GPUs), in 1e9 B:
//   DDP 21; ZeRO-1 over d: 13 + 8/d (17, 15, 14); ZeRO-2: 9 + 12/d (15, 12, 10.5);
//   ZeRO-3: 6 + 16/d (14, 10, 8; incl. 1e9 gather buffer and 1e9 other fixed).
Catalog synthetic_catalog() {
  auto dev = [](const std::string& name, const std::string& gb) {
    return "  - name: " + name + "\n    platform: cuda\n    memory_gb: " + gb +
           "\n    bf16_tflops: 100\n    memory_bandwidth_tbps: 1\n"
           "    interconnect: {name: link, gb_per_s: 100}\n"
           "    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n";
  };
  return load_catalog_string("devices:\n" + dev("ddp-just-fits", "21.001") + dev("ddp-just-misses", "20.999") +
                                 dev("zero2", "13") + dev("zero3", "9") + dev("none", "4.5"),
                             "synthetic");
}

const json& device(const json& plan, const std::string& name) {
  for (const auto& d : plan["devices"])
    if (d["name"] == name) return d;
  static const json none;
  ADD_FAILURE() << "no device " << name;
  return none;
}

// A program's report: its declared shape (micro-batch 2, seq 100) is the target,
// whatever train.* and data.* say; one memory point; FLOPs it gave.
json program_report() {
  json r = synthetic::synthetic_report();
  r["program"] = {{"command", {"python3", "train.py"}}, {"versions", {{"torch", "2.5.0"}}}};
  r["manifest"].erase("dependencies");
  auto& m = r["measurements"];
  m["model"] = {
      {"parameters", 1000000000}, {"micro_batch", 2},  {"seq_len", 100},         {"grad_accum", 1},
      {"n_layer", nullptr},       {"n_embd", nullptr}, {"flops_per_token", 6e9}, {"flops_source", "6 x parameters"}};
  m["memory"]["points"] = json::array({{{"micro_batch", 2}, {"seq_len", 100}, {"peak_allocated_bytes", 17.2e9}}});
  m["memory"]["baseline_bytes"] = 4.1e9;  // the parameters + 0.1e9 held before the first step
  return r;
}

TEST(MakePlan, FromAProgramsMeasurements) {
  const Measured m = measured_from_report(program_report());
  EXPECT_TRUE(m.program);
  EXPECT_EQ(m.libtorch, "2.5.0");
  EXPECT_EQ(m.memory_points.size(), 1u);
  const json p = make_plan(m, synthetic_catalog(), synthetic::synthetic_config());
  EXPECT_EQ(p["target"]["micro_batch"], 2);
  EXPECT_EQ(p["target"]["seq_len"], 100);
  EXPECT_EQ(p["memory_model"]["points_measured"], 1);
  // fixed = state 16e9 + (baseline 4.1e9 - parameters 4e9); activations 1.1e9 / 200 tokens.
  EXPECT_NEAR(p["memory_model"]["fixed_bytes"].get<double>(), 16.1e9, 1e3);
  EXPECT_NEAR(p["memory_model"]["a_bytes_per_token"].get<double>(), 1.1e9 / 200, 1e-3);
  EXPECT_NEAR(device(p, "ddp-just-fits")["predicted_peak_bytes"].get<double>(), 17.2e9, 1e3);
  bool said = false;
  for (const auto& w : p["warnings"])
    said = said || w.get<std::string>().find("one measured point") != std::string::npos;
  EXPECT_TRUE(said) << p["warnings"].dump();
  // No model.* mismatch warning: a program's model is not anchor's config.
  for (const auto& w : p["warnings"]) EXPECT_EQ(w.get<std::string>().find("model.* differs"), std::string::npos);
  // The same report through the JSON overload.
  EXPECT_EQ(make_plan(program_report(), synthetic_catalog(), synthetic::synthetic_config())["memory_model"],
            p["memory_model"]);
  // A built-in report with one point is still refused: the one-point model is a program's.
  json builtin = synthetic::synthetic_report();
  builtin["measurements"]["memory"]["points"] = json::array({builtin["measurements"]["memory"]["points"][0]});
  EXPECT_THROW(make_plan(builtin, synthetic_catalog(), synthetic::synthetic_config()), anchor::Error);
  // Negative control: without its shape a program's report is refused, naming the field.
  json bad = program_report();
  bad["measurements"]["model"].erase("seq_len");
  try {
    measured_from_report(bad);
    ADD_FAILURE() << "no error";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("measurements/model/seq_len"), std::string::npos) << e.what();
  }
}

// The plan says when it changes what the config asked for: another global
// batch on more GPUs, and a run that reads its data many times.
bool warns(const json& plan, const std::string& what) {
  for (const auto& w : plan["warnings"])
    if (w.get<std::string>().find(what) != std::string::npos) return true;
  return false;
}

TEST(MakePlan, SaysWhenTheGlobalBatchChangesAndHowManyEpochs) {
  auto cfg = synthetic::synthetic_config();  // micro_batch 4, grad_accum 1, one rank; 8 GPUs; 1000 steps of seq 1000
  json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_EQ(p["target"]["global_batch"], 32);
  EXPECT_EQ(p["target"]["config_global_batch"], 4);
  EXPECT_TRUE(warns(p, "takes 32 sequences per optimizer step, not the config's 4")) << p["warnings"].dump(2);
  EXPECT_TRUE(warns(p, "in 125 steps instead of 1000")) << p["warnings"].dump(2);
  EXPECT_TRUE(warns(p, "no micro_batch x grad_accum on 8 GPUs gives exactly 4 sequences")) << p["warnings"].dump(2);
  // A batch of 64 (micro_batch 4 x grad_accum 16) on 8 GPUs: 8 per GPU, micro_batch 4 x grad_accum 2.
  cfg.train.grad_accum = 16;
  cfg.train.global_batch = 64;
  p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_TRUE(warns(p, "takes 512 sequences per optimizer step, not the config's 64")) << p["warnings"].dump(2);
  EXPECT_TRUE(warns(p, "the long run at micro_batch 4 x grad_accum 2 per GPU keeps the config's batch"))
      << p["warnings"].dump(2);
  // 24 on 8 GPUs: 3 per GPU, which micro_batch 4 does not divide: micro_batch 3 x grad_accum 1.
  cfg.train.grad_accum = 6;
  cfg.train.global_batch = 24;
  p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_TRUE(warns(p, "micro_batch 3 x grad_accum 1 per GPU")) << p["warnings"].dump(2);
  // Negative control: one GPU at the config's shape is the config's batch.
  cfg = synthetic::synthetic_config();
  cfg.budget.gpus_per_node = 1;
  p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_EQ(p["target"]["global_batch"], p["target"]["config_global_batch"]);
  EXPECT_FALSE(warns(p, "global batch:")) << p["warnings"].dump(2);

  // Epochs: 4e6 tokens over 100 windows of 1000 tokens is 40 passes; the data's size comes from the load stage.
  EXPECT_TRUE(p["target"]["epochs"].is_null()) << "no load figures: the data's size is not known";
  EXPECT_FALSE(warns(p, "epochs"));
  json r = synthetic::synthetic_report();
  r["stages"].push_back({{"stage", "load"}, {"status", "passed"}, {"figures", {{"train_windows", 100}}}});
  p = make_plan(r, synthetic_catalog(), cfg);
  EXPECT_DOUBLE_EQ(p["target"]["epochs"].get<double>(), 40.0);
  EXPECT_TRUE(warns(p, "40.0 epochs")) << p["warnings"].dump(2);
  // Another data.seq_len in the plan does not change the data's size (the pilot's windows are its seq_len's).
  auto other_seq = cfg;
  other_seq.data.seq_len = 500;
  other_seq.train.total_tokens = 4000000;  // the same tokens as 1000 steps of 4 x 1000
  EXPECT_DOUBLE_EQ(make_plan(r, synthetic_catalog(), other_seq)["target"]["epochs"].get<double>(), 40.0);
  r["stages"].back()["figures"]["train_windows"] = 1000000;  // 1e9 tokens: under one pass
  p = make_plan(r, synthetic_catalog(), cfg);
  EXPECT_FALSE(warns(p, "epochs")) << p["warnings"].dump(2);
}

TEST(MakePlan, DecisionsAtTheBoundaries) {
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  EXPECT_NEAR(p["memory_model"]["fixed_bytes"].get<double>(), 17e9, 1e2);
  EXPECT_NEAR(p["memory_model"]["other_fixed_bytes"].get<double>(), 1e9, 1e2);
  EXPECT_NEAR(p["memory_model"]["a_bytes_per_token"].get<double>(), 1e6, 1e-3);

  const json& fits = device(p, "ddp-just-fits");
  EXPECT_TRUE(fits["fits"].get<bool>());
  EXPECT_EQ(fits["strategy"], "ddp");
  EXPECT_NEAR(fits["predicted_peak_bytes"].get<double>(), 21e9, 1e3);

  // Negative control: 2 MB less memory and DDP no longer fits; ZeRO-1 over 2 does.
  const json& misses = device(p, "ddp-just-misses");
  EXPECT_TRUE(misses["fits"].get<bool>());
  EXPECT_EQ(misses["strategy"], "zero1");
  EXPECT_EQ(misses["sharding_degree"], 2);
  EXPECT_NEAR(misses["predicted_peak_bytes"].get<double>(), 17e9, 1e3);
  EXPECT_FALSE(misses["considered"][0]["fits"].get<bool>());

  // 13 GB: ZeRO-1 bottoms out at 14e9 (degree 8); ZeRO-2 over 4 needs 12e9.
  const json& z2 = device(p, "zero2");
  EXPECT_EQ(z2["strategy"], "zero2");
  EXPECT_EQ(z2["sharding_degree"], 4);

  const json& z3 = device(p, "zero3");
  EXPECT_EQ(z3["strategy"], "zero3");
  EXPECT_EQ(z3["sharding_degree"], 8);
  EXPECT_NEAR(z3["predicted_peak_bytes"].get<double>(), 8e9, 1e3);

  const json& none = device(p, "none");
  EXPECT_FALSE(none["fits"].get<bool>());
  EXPECT_EQ(none["strategy"], "none");
  EXPECT_EQ(none["max_micro_batch"], 0);
  EXPECT_NE(none["decision"].get<std::string>().find("does not fit"), std::string::npos);
}

TEST(MakePlan, ZeroTwoIsChosenBeforeZeroThree) {
  // 13 GB: ZeRO-1 never fits (best 14e9 at degree 8), ZeRO-2 over 4 does
  // (4 + 1 + 2 + 1 + 4 = 12e9): stage order wins over degree.
  auto cat = load_catalog_string(
      "devices:\n  - name: d13\n    platform: cuda\n    memory_gb: 13\n    bf16_tflops: 100\n"
      "    memory_bandwidth_tbps: 1\n    interconnect: {name: l, gb_per_s: 100}\n"
      "    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n",
      "c");
  const json p = make_plan(synthetic::synthetic_report(), cat, synthetic::synthetic_config());
  const json& d = device(p, "d13");
  EXPECT_EQ(d["strategy"], "zero2");
  EXPECT_EQ(d["sharding_degree"], 4);
  EXPECT_NEAR(d["predicted_peak_bytes"].get<double>(), 12e9, 1e3);
  // Comm: ZeRO-2 over 4 of 8, G = 4e9: 2*3/4*G + replicas 2*(1/2)*G/4 = 7e9 B at a bus
  // bandwidth of 0.4 x 100 GB/s (no published figure), in 268 buckets of 25 MiB each
  // paying 6 tree steps (2 log2 8 < a ring's 14) of 5 us: 0.175 + 0.00804 s. The
  // backward (2/3 of 1.2 s) hides all but the last bucket.
  EXPECT_NEAR(d["comm_bytes_per_step"].get<double>(), 7e9, 1);
  const json& c = d["communication"];
  EXPECT_EQ(c["messages"].get<double>(), 268.0);
  EXPECT_EQ(c["latency_steps_per_message"].get<double>(), 6.0);
  EXPECT_NEAR(c["total_seconds"].get<double>(), 0.175 + 268 * 6 * 5e-6, 1e-12);
  EXPECT_NEAR(c["overlap_window_seconds"].get<double>(), 0.8, 1e-12);
  EXPECT_NEAR(d["comm_seconds_per_step"].get<double>(), (0.175 + 268 * 6 * 5e-6) / 268, 1e-12);
  // Fully sharded ZeRO-3 costs 1.5x DDP: 3*7/8*G = 10.5e9 B.
  const json p2 = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  EXPECT_NEAR(device(p2, "zero3")["comm_bytes_per_step"].get<double>(), 10.5e9, 1);
}

TEST(MakePlan, StepTimeCommAndBudgetHandWorked) {
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  const json& d = device(p, "ddp-just-fits");
  // DDP over 8, G = 4e9: 2 * 7/8 * 4e9 = 7e9 B at 40 GB/s (0.4 x the 100 GB/s link) = 0.175 s,
  // plus 268 buckets x 6 steps x 5 us; all but the last bucket hidden behind the backward.
  const double ddp_comm = 0.175 + 268 * 6 * 5e-6;
  EXPECT_NEAR(d["communication"]["total_seconds"].get<double>(), ddp_comm, 1e-12);
  EXPECT_NEAR(d["comm_seconds_per_step"].get<double>(), ddp_comm / 268, 1e-12);
  // fp32: half of 100 TFLOPS; 4000 tokens x 6e9 FLOPs / (50e12 x 0.4) = 1.2 s, against the
  // weights read 3x and the gradients 2x (20e9 B at 1 TB/s x 0.8 = 0.025 s): compute-bound.
  // The optimizer step moves 2 x 8e9 + 4e9 + 2 x 4e9 = 28e9 B: 0.035 s, memory-bound.
  EXPECT_NEAR(d["roofline"]["forward_backward"]["flops_seconds"].get<double>(), 1.2, 1e-9);
  EXPECT_NEAR(d["roofline"]["forward_backward"]["memory_seconds"].get<double>(), 0.025, 1e-9);
  EXPECT_EQ(d["roofline"]["forward_backward"]["bound"], "compute");
  EXPECT_NEAR(d["roofline"]["optimizer"]["memory_seconds"].get<double>(), 0.035, 1e-9);
  EXPECT_NEAR(d["compute_seconds_per_step"].get<double>(), 1.235, 1e-9);
  EXPECT_NEAR(d["projected_step_seconds"].get<double>(), 1.235 + ddp_comm / 268, 1e-9);
  // 1000 configured steps x 4 seqs x 1000 tokens = 4e6 tokens over 8 GPUs x 4000 = 125 steps.
  EXPECT_EQ(p["target"]["long_run_steps"].get<double>(), 125.0);
  // Every fitting device costs one 7-day term (same example price); the tie
  // goes to the lowest cost per token. The communication is hidden on all of
  // them, so the optimizer step decides: ZeRO-3 over 8 updates an eighth of
  // the state (0.004375 s against DDP's 0.035 s and ZeRO-2/4's 0.00875 s).
  const json& rec = p["recommendation"];
  ASSERT_FALSE(rec["device"].is_null());
  EXPECT_EQ(rec["device"], "zero3");
  const json& z3 = device(p, "zero3");
  EXPECT_NEAR(z3["roofline"]["optimizer"]["memory_seconds"].get<double>(), 0.004375, 1e-9);
  // ZeRO-3: 10.5e9 B (0.2625 s + 401 buckets x 6 x 5 us), hidden behind the whole forward and backward.
  const double z3_comm = 0.2625 + 401 * 6 * 5e-6;
  EXPECT_NEAR(z3["communication"]["total_seconds"].get<double>(), z3_comm, 1e-12);
  EXPECT_NEAR(z3["communication"]["overlap_window_seconds"].get<double>(), 1.2, 1e-12);
  const double z3_step = 1.2 + 0.004375 + z3_comm / 401;
  EXPECT_NEAR(z3["projected_step_seconds"].get<double>(), z3_step, 1e-9);
  EXPECT_DOUBLE_EQ(rec["cost"].get<double>(), 8 * 168 * 2.0);
  // No failures, no margin: 125 steps + one 80 s save + copy-off 16 GB at 1 Gbit/s (128 s).
  const json& b = p["budget"];
  EXPECT_NEAR(b["hours"].get<double>(), (125 * z3_step + 80 + 128) / 3600, 1e-9);
  EXPECT_EQ(b["checkpoints"].get<double>(), 1.0);
  EXPECT_EQ(b["term"], "7-day");
}

// With on-demand prices the short job is paid by the hour: the recommendation's
// cost is its GPU-hours times the device's on-demand price, not a whole term.
TEST(MakePlan, AShortJobIsPaidForTheHoursItNeeds) {
  Catalog cat = synthetic_catalog();
  for (auto& d : cat.devices) d.price_on_demand = 2.5;
  const json p = make_plan(synthetic::synthetic_report(), cat, synthetic::synthetic_config());
  const json& rec = p["recommendation"];
  ASSERT_FALSE(rec["device"].is_null());
  EXPECT_EQ(rec["pricing"], "on-demand");
  const json& b = p["budget"];
  EXPECT_NEAR(rec["cost"].get<double>(), b["gpu_hours"].get<double>() * 2.5, 1e-9);
  EXPECT_LT(rec["cost"].get<double>(), b["cost_7_day"].get<double>());
  EXPECT_NE(format_plan(p).find("pay on-demand: "), std::string::npos) << format_plan(p);
  EXPECT_NE(format_plan_summary(p, "runs/x").find(" on-demand"), std::string::npos) << format_plan_summary(p, "runs/x");
  // Control: the same plan without on-demand prices pays a whole 7-day term.
  const json q = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  EXPECT_EQ(q["recommendation"]["pricing"], "7-day");
  EXPECT_DOUBLE_EQ(q["recommendation"]["cost"].get<double>(), 8 * 168 * 2.0);
}

// The communication model: the published bus bandwidth when the catalog gives
// it, the network's across nodes (slower, with its own latency), and what the
// backward pass cannot hide. Controls: one node ignores the network; a catalog
// without a network says the multi-node figure is optimistic.
TEST(MakePlan, CommunicationTakesTheSlowestLinkItsLatencyAndTheOverlap) {
  const auto catalog = [](const std::string& extra) {
    return load_catalog_string(
        "devices:\n  - name: g\n    platform: cuda\n    memory_gb: 80\n    bf16_tflops: 100\n"
        "    memory_bandwidth_tbps: 1\n"
        "    interconnect: {name: nvl, gb_per_s: 100, allreduce_busbw_gb_per_s: 70, latency_us: 4}\n" +
            extra + "    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n",
        "c");
  };
  const auto net = catalog("    network: {name: ib, gb_per_s: 5, latency_us: 12}\n");
  anchor::config::Config cfg = synthetic::synthetic_config();
  const json one = device(make_plan(synthetic::synthetic_report(), net, cfg), "g");
  // One node of 8: DDP's 7e9 B at the published 70 GB/s, 268 buckets x 6 steps x 4 us.
  EXPECT_NEAR(one["communication"]["total_seconds"].get<double>(), 7e9 / 70e9 + 268 * 6 * 4e-6, 1e-12);
  EXPECT_EQ(one["communication"]["link"], "nvl");
  EXPECT_LT(one["comm_seconds_per_step"].get<double>(), 0.001);  // hidden but the last bucket
  cfg.budget.nodes = 2;  // 16 GPUs: 2 * 15/16 * 4e9 = 7.5e9 B across the 5 GB/s network, 8 steps of 12 us
  const json two = device(make_plan(synthetic::synthetic_report(), net, cfg), "g");
  EXPECT_EQ(two["communication"]["link"], "nvl inside a node, ib between nodes");
  const double total = 7.5e9 / 5e9 + 287 * 8 * 12e-6;
  EXPECT_NEAR(two["communication"]["total_seconds"].get<double>(), total, 1e-12);
  // The backward (2/3 of 1.2 s) hides 0.8 s of it; the rest is in the step.
  EXPECT_NEAR(two["comm_seconds_per_step"].get<double>(), total - 0.8, 1e-9);
  // Control: the same two nodes with no network in the catalog: the intra-node
  // figure, and the plan says it is optimistic.
  const json p = make_plan(synthetic::synthetic_report(), catalog(""), cfg);
  EXPECT_EQ(device(p, "g")["communication"]["link"], "nvl");
  bool optimistic = false;
  for (const auto& a : p["assumptions"])
    optimistic = optimistic || a.get<std::string>().find("OPTIMISTIC") != std::string::npos;
  EXPECT_TRUE(optimistic) << p["assumptions"].dump(1);
}

// How many GPUs: the counts 1, 2, 4, 8 searched; the cheapest that ends
// within budget.deadline_days is planned (the synthetic job needs 20 minutes
// on one GPU: one GPU, one 7-day term of it, not eight).
TEST(Search, TheCheapestCountThatMeetsTheDeadlineIsPlanned) {
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.budget.search_gpu_count = true;
  cfg.budget.devices = {"ddp-just-fits"};
  json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  const json& d = device(p, "ddp-just-fits");
  std::vector<int> counts;
  for (const auto& row : d["scaling"]["curve"]) counts.push_back(row["gpus"].get<int>());
  EXPECT_EQ(counts, (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(p["recommendation"]["gpus"], 1);
  EXPECT_DOUBLE_EQ(p["recommendation"]["cost"].get<double>(), 1 * 168 * 2.0);
  EXPECT_EQ(p["target"]["world_size"], 1);
  EXPECT_EQ(p["target"]["max_gpus"], 8);
  // 1000 steps of 1.235 s, one 80 s save and 128 s of copy-off: 0.0167 days. A deadline
  // of 0.01 days needs 2 GPUs (500 steps: 0.0096 days).
  cfg.budget.deadline_days = 0.01;
  p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_EQ(p["recommendation"]["gpus"], 2);
  EXPECT_LE(p["recommendation"]["days"].get<double>(), 0.01);
  // None meets 0.001 days: the soonest done (8 GPUs), and it says so.
  cfg.budget.deadline_days = 0.001;
  p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_EQ(p["recommendation"]["gpus"], 8);
  EXPECT_NE(p["recommendation"]["why"].get<std::string>().find("no device ends the run within"), std::string::npos);
  // Control: search_gpu_count false plans exactly the 8.
  cfg.budget.deadline_days = 30;
  cfg.budget.search_gpu_count = false;
  EXPECT_EQ(make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg)["recommendation"]["gpus"], 8);
}

// The knee moves with the links: behind a fast one the communication hides in
// the backward pass and scaling stays above 0.8 to 32 GPUs; behind a slow
// network it falls past the first node (16 GPUs), and behind a slow
// interconnect at 2 GPUs already, each named as communication.
TEST(Search, TheKneeMovesWithTheInterconnectAndTheNetwork) {
  const auto knee_of = [](const std::string& links) {
    anchor::config::Config cfg = synthetic::synthetic_config();
    cfg.budget.search_gpu_count = true;
    cfg.budget.nodes = 4;
    const auto cat = load_catalog_string(
        "devices:\n  - name: g\n    platform: cuda\n    memory_gb: 80\n    bf16_tflops: 100\n"
        "    memory_bandwidth_tbps: 1\n" +
            links + "    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n",
        "c");
    return device(make_plan(synthetic::synthetic_report(), cat, cfg), "g")["scaling"]["knee"];
  };
  const json fast = knee_of("    interconnect: {name: nvl, gb_per_s: 100}\n    network: {name: ib, gb_per_s: 50}\n");
  EXPECT_TRUE(fast.is_null()) << fast;
  const json slow_net = knee_of("    interconnect: {name: nvl, gb_per_s: 100}\n    network: {name: ib, gb_per_s: 1}\n");
  ASSERT_FALSE(slow_net.is_null());
  EXPECT_EQ(slow_net["gpus"], 16);
  EXPECT_EQ(slow_net["cause"].get<std::string>().rfind("communication: ", 0), 0u) << slow_net;
  const json slow_link =
      knee_of("    interconnect: {name: pcie, gb_per_s: 1}\n    network: {name: ib, gb_per_s: 50}\n");
  ASSERT_FALSE(slow_link.is_null());
  EXPECT_EQ(slow_link["gpus"], 2);
}

// The knee moves with the node's input: the preflight's measured read of the
// training data, in tokens/s per node, caps what a node's GPUs get. At 2.5x
// one GPU's rate the knee is at 4 GPUs (efficiency 2.5/4), at 5x at 8
// (5/8), named as input; at 100x there is none (the control, behind fast links).
TEST(Search, TheKneeMovesWithTheNodesMeasuredInput) {
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.budget.search_gpu_count = true;
  cfg.budget.nodes = 2;
  const auto cat = load_catalog_string(
      "devices:\n  - name: g\n    platform: cuda\n    memory_gb: 80\n    bf16_tflops: 100\n"
      "    memory_bandwidth_tbps: 1\n    interconnect: {name: nvl, gb_per_s: 100}\n"
      "    network: {name: ib, gb_per_s: 50}\n    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n",
      "c");
  const json base = device(make_plan(synthetic::synthetic_report(), cat, cfg), "g");
  const double one = base["scaling"]["curve"][0]["tokens_per_s"].get<double>();
  ASSERT_GT(one, 0);
  EXPECT_TRUE(base["scaling"]["knee"].is_null()) << base["scaling"]["knee"];
  const auto with_input = [&](double tokens_per_s) {
    json r = synthetic::synthetic_report();
    r["node"]["data"] = {{"mb_per_s", tokens_per_s * 2 / 1e6}, {"tokens_per_s", tokens_per_s}, {"kind", "MEASURED"}};
    return make_plan(r, cat, cfg);
  };
  json p = with_input(2.5 * one);
  json knee = device(p, "g")["scaling"]["knee"];
  ASSERT_FALSE(knee.is_null());
  EXPECT_EQ(knee["gpus"], 4);
  EXPECT_NEAR(knee["scaling_efficiency"].get<double>(), 2.5 / 4, 1e-6);
  EXPECT_EQ(knee["cause"].get<std::string>().rfind("input: the node's storage, read at the preflight's measured", 0),
            0u)
      << knee;
  EXPECT_DOUBLE_EQ(p["node"]["input"]["tokens_per_s_per_node"].get<double>(), 2.5 * one);
  // Two nodes read twice as much: 16 GPUs run at twice 8's rate.
  const json curve = device(p, "g")["scaling"]["curve"];
  ASSERT_EQ(curve.size(), 5u);
  EXPECT_EQ(curve[4]["gpus"], 16);
  EXPECT_NEAR(curve[4]["tokens_per_s"].get<double>(), 2 * curve[3]["tokens_per_s"].get<double>(), 1e-6);
  knee = device(with_input(5 * one), "g")["scaling"]["knee"];
  ASSERT_FALSE(knee.is_null());
  EXPECT_EQ(knee["gpus"], 8);
  EXPECT_TRUE(device(with_input(100 * one), "g")["scaling"]["knee"].is_null());
}

// The communication model against the pilot's own ranks: the preflight's
// all-reduce (latency, bus bandwidth) predicts the DDP all-reduce the step
// measured; the plan shows both and their ratio.
TEST(MakePlan, ChecksTheCommunicationModelAgainstThePilotsRanks) {
  anchor::config::Config cfg = synthetic::synthetic_config();
  json r = synthetic::synthetic_report();
  r["distributed"] = {{"strategy", "ddp"},
                      {"world_size", 2},
                      {"per_rank", {{{"rank", 0}, {"comm_s", 9.0}}, {{"rank", 1}, {"comm_s", 4.5}}}}};
  r["node"]["all_reduce"] = {
      {"ranks", 2}, {"backend", "gloo"}, {"latency_us", 1000.0}, {"busbw_gb_per_s", 1.0}, {"kind", "MEASURED"}};
  const json p = make_plan(r, synthetic_catalog(), cfg);
  const json& c = p["node"]["all_reduce"]["check"];
  // 4e9 gradient bytes in 25 MiB buckets: 153 messages x 1 ms + 4e9 x 2(2-1)/2 B at 1 GB/s = 4.153 s.
  EXPECT_EQ(c["messages"].get<double>(), 153);
  EXPECT_NEAR(c["predicted_comm_s"].get<double>(), 4.153, 1e-9);
  EXPECT_DOUBLE_EQ(c["measured_comm_s"].get<double>(), 4.5);  // the rank that waited least
  EXPECT_NEAR(c["measured_over_predicted"].get<double>(), 4.5 / 4.153, 1e-9);
  EXPECT_NE(anchor::plan::format_plan(p).find("the communication model against the pilot's 2 ranks: predicted "
                                              "4153.000 ms, measured 4500.000 ms (1.08x"),
            std::string::npos)
      << anchor::plan::format_plan(p);
  // No check where the preflight measured other ranks than the pilot ran, or none.
  r["node"]["all_reduce"]["ranks"] = 3;
  EXPECT_FALSE(make_plan(r, synthetic_catalog(), cfg)["node"]["all_reduce"].contains("check"));
  r["node"]["all_reduce"] = {{"skipped", "one rank"}};
  EXPECT_FALSE(make_plan(r, synthetic_catalog(), cfg)["node"].contains("all_reduce"));
  // A hostile figure (negative, not finite) is not measured.
  r["node"]["all_reduce"] = {{"ranks", 2}, {"latency_us", -1.0}, {"busbw_gb_per_s", -5.0}};
  EXPECT_FALSE(make_plan(r, synthetic_catalog(), cfg)["node"].contains("all_reduce"));
}

// The advice argues DataParallel against DDP and DDP against FSDP with the
// run's numbers: the synthetic 1e9-parameter model on 8 of the DDP-sized device.
TEST(MakePlan, AdviceArguesDataParallelAndFsdpWithTheRunsNumbers) {
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.budget.devices = {"ddp-just-fits"};
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  ASSERT_EQ(p["advice"].size(), 2u) << p["advice"].dump(1);
  const std::string dp = p["advice"][0], fsdp = p["advice"][1];
  // DataParallel at 8: 7 x (4e9 + 4e9) = 56 GB through GPU 0's 40 GB/s (1400 ms); DDP 7e9 B (175 ms).
  EXPECT_NE(dp.find("at 8 x ddp-just-fits DataParallel's one process would copy"), std::string::npos) << dp;
  EXPECT_NE(dp.find("56.00 GB through one link (1400.00 ms)"), std::string::npos) << dp;
  EXPECT_NE(dp.find("DDP all-reduces 7.00 GB per GPU in buckets (175.00 ms)"), std::string::npos) << dp;
  // DDP's replica: 21e9 B (19.56 GiB) fits 21.001e9; FSDP over 8: 8e9 B, moving 10.5 GB against 7.
  EXPECT_EQ(fsdp.rfind("DDP at 8 GPUs: DDP keeps a whole replica, 19.56 GiB per GPU", 0), 0u) << fsdp;
  EXPECT_NE(fsdp.find("(it fits); FSDP shards it to 7.45 GiB but moves 10.50 GB per GPU per step against DDP's 7.00"),
            std::string::npos)
      << fsdp;
  EXPECT_NE(format_plan(p).find("Advice:\n  - DDP, one process per GPU"), std::string::npos);
  // Control: where DDP does not fit, FSDP is what it says.
  cfg.budget.devices = {"zero3"};
  const json q = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  EXPECT_EQ(q["advice"][1].get<std::string>().rfind("FSDP (ZeRO-3) at 8 GPUs", 0), 0u) << q["advice"][1];
  EXPECT_NE(q["advice"][1].get<std::string>().find("(it does not fit)"), std::string::npos);
}

// The roofline: H100 and H200 have the same bf16 peak, 3.35 and 4.8 TB/s. Where
// forward and backward are compute-bound only the optimizer step (memory-bound)
// differs; at a small micro-step (1 x 100 tokens) the weights' traffic
// dominates and the whole step is faster on H200 by close to 4.8 / 3.35.
TEST(MakePlan, MemoryBandwidthSeparatesH100FromH200WhereAPhaseIsMemoryBound) {
  const Catalog cat = load_catalog(std::string(ANCHOR_SOURCE_DIR) + "/configs/catalog.yaml");
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.budget.devices = {"H100-80GB-SXM", "H200-141GB"};
  const auto phase = [](const json& d, const char* p, const char* k) { return d["roofline"][p][k]; };
  const json big = make_plan(synthetic::synthetic_report(), cat, cfg);
  const json &h100 = device(big, "H100-80GB-SXM"), &h200 = device(big, "H200-141GB");
  EXPECT_EQ(phase(h100, "forward_backward", "bound"), "compute");
  EXPECT_DOUBLE_EQ(phase(h100, "forward_backward", "flops_seconds").get<double>(),
                   phase(h200, "forward_backward", "flops_seconds").get<double>());
  EXPECT_NEAR(phase(h100, "optimizer", "memory_seconds").get<double>() /
                  phase(h200, "optimizer", "memory_seconds").get<double>(),
              4.8 / 3.35, 1e-9);
  cfg.train.micro_batch = 1;
  cfg.data.seq_len = 100;
  const json small = make_plan(synthetic::synthetic_report(), cat, cfg);
  const json &s100 = device(small, "H100-80GB-SXM"), &s200 = device(small, "H200-141GB");
  EXPECT_EQ(phase(s100, "forward_backward", "bound"), "memory");
  EXPECT_EQ(phase(s200, "forward_backward", "bound"), "memory");
  const double ratio = s100["compute_seconds_per_step"].get<double>() / s200["compute_seconds_per_step"].get<double>();
  EXPECT_NEAR(ratio, 4.8 / 3.35, 1e-9) << "both phases memory-bound: the bandwidths' ratio";
  // Control: at the compute-bound shape the step's compute differs by much less.
  const double big_ratio =
      h100["compute_seconds_per_step"].get<double>() / h200["compute_seconds_per_step"].get<double>();
  EXPECT_LT(big_ratio, 1.05);
}

TEST(MakePlan, LowPrecisionOverrideAndAssumptions) {
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.train.precision = "bf16";
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg);
  const json& d = device(p, "ddp-just-fits");
  EXPECT_NEAR(d["predicted_peak"]["activations"].get<double>(), 2e9, 1e3);
  EXPECT_NEAR(d["predicted_peak"]["cast_weights"].get<double>(), 2e9, 1e3);
  EXPECT_NEAR(d["predicted_peak"]["optimizer"].get<double>(), 8e9, 1e3);
  bool stated = false;
  for (const auto& a : p["assumptions"])
    if (a.get<std::string>().find("optimizer state are unchanged") != std::string::npos) stated = true;
  EXPECT_TRUE(stated);
  // bf16 runs at the full bf16 peak: half the fp32 FLOP time (0.6 s), plus the
  // same optimizer step (0.035 s).
  EXPECT_NEAR(d["roofline"]["forward_backward"]["flops_seconds"].get<double>(), 0.6, 1e-9);
  EXPECT_NEAR(d["compute_seconds_per_step"].get<double>(), 0.635, 1e-9);
}

TEST(MakePlan, ErrorsNameWhatIsMissing) {
  json r = synthetic::synthetic_report();
  r["measurements"]["memory"].erase("points");
  try {
    make_plan(r, synthetic_catalog(), synthetic::synthetic_config());
    FAIL();
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("measurements/memory/points"), std::string::npos) << e.what();
  }
  anchor::config::Config cfg = synthetic::synthetic_config();
  cfg.budget.devices = {"TPU-v9"};
  EXPECT_THROW(make_plan(synthetic::synthetic_report(), synthetic_catalog(), cfg), anchor::Error);
}

TEST(MakePlan, FormatsATable) {
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  const std::string t = format_plan(p);
  EXPECT_NE(t.find("Memory model"), std::string::npos);
  EXPECT_NE(t.find("ddp-just-misses"), std::string::npos);
  EXPECT_NE(t.find("Assumptions"), std::string::npos);
  EXPECT_NE(t.find("Recommendation"), std::string::npos);
}

// The console's summary: the recommendation and where the rest is; a plan that is not there (a
// program that declared no shape) or is partial is said, never read past its keys.
TEST(MakePlan, SummarisesInAFewLinesAndSurvivesAPartialPlan) {
  const json p = make_plan(synthetic::synthetic_report(), synthetic_catalog(), synthetic::synthetic_config());
  const std::string t = format_plan_summary(p, "/runs/r1");
  const auto& r = p["recommendation"];
  EXPECT_EQ(t.rfind("Plan: " + r["gpus"].dump() + " x " + r["device"].get<std::string>() + ", ", 0), 0u) << t;
  EXPECT_NE(t.find("  fits: "), std::string::npos) << t;
  EXPECT_NE(t.find("/runs/r1/report.md"), std::string::npos) << t;
  EXPECT_EQ(t.find("Assumptions"), std::string::npos) << t;
  EXPECT_LE(std::count(t.begin(), t.end(), '\n'), 5 + static_cast<long>(p["warnings"].size())) << t;
  EXPECT_EQ(format_plan_summary({{"status", "not planned"}, {"why", "no shape"}}, "/r"),
            "Plan: not planned: no shape\n");
  EXPECT_EQ(format_plan_summary(json::object(), "/r"), "Plan: not planned\n");
  const std::string partial = format_plan_summary({{"recommendation", {{"device", "X"}}}}, "/r");
  EXPECT_NE(partial.find("Plan: - x X"), std::string::npos) << partial;
  EXPECT_NE(partial.find("0 assumptions"), std::string::npos) << partial;
}

}  // namespace
