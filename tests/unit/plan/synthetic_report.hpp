#pragma once
// A synthetic pilot report with round numbers, so the plan tests can be
// worked by hand (tests/unit/plan/README in docs/plan.md "worked example"):
//
//   state: parameters 4e9 B, gradients 4e9 B, optimizer 8e9 B (1e9 fp32 params, AdamW)
//   other fixed 1e9 B  -> fixed = 17e9 B
//   activations a = 1e6 B/token, b = 0  (points at T = 1000 and 500)
//   target micro_batch 4, seq_len 1000 -> activations 4e9 B, DDP peak 21e9 B
//   n_layer 4 (ZeRO-3 gather buffer = 1e9 B), flops_per_token 6e9 at T = 1000
//   checkpoint save 16e9 B in 80 s
#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::plan::synthetic {

// Planned at exactly its 8 GPUs: the tests of the search set search_gpu_count.
inline config::Config synthetic_config() {
  config::Config c = config::load_string(
      "data: {format: llmc, train: [train.bin], seq_len: 1000}\n"
      "model: {n_layer: 4, n_head: 16, n_embd: 2048, vocab_size: 50304, block_size: 1024}\n"
      "train: {micro_batch: 4, grad_accum: 1, total_steps: 1000, precision: fp32,\n"
      "        schedule: {warmup_steps: 10}}\n"
      "budget: {nodes: 1, gpus_per_node: 8, headroom: 0.0, failures_per_day: 0.0,\n"
      "         margin: 0.0, search_gpu_count: false}\n",
      "<synthetic>");
  return c;
}

inline double peak(double mb, double t) { return 17e9 + 1e6 * mb * t; }

inline nlohmann::json synthetic_report() {
  nlohmann::json r;
  r["format"] = "anchor.report/v1";
  r["device"] = "cpu";
  r["config"] = config::to_json(synthetic_config());
  r["config_path"] = "";
  r["manifest"]["dependencies"]["libtorch"] = "1.13.0";
  r["stages"] = nlohmann::json::array(
      {{{"stage", "train"}, {"status", "passed"}}, {{"stage", "checkpoint_save"}, {"status", "passed"}}});
  auto& m = r["measurements"];
  m["model"] = {{"parameters", 1000000000}, {"n_layer", 4},    {"n_head", 16},          {"n_embd", 2048},
                {"vocab_size", 50304},      {"seq_len", 1000}, {"flops_per_token", 6e9}};
  m["step"] = {{"seconds", 2.0},     {"tokens", 4000},   {"tokens_per_s", 2000.0},
               {"data_wait_s", 0.0}, {"compute_s", 2.0}, {"stall_percent", 0.0},
               {"micro_batch", 4},   {"grad_accum", 1},  {"world_size", 1}};
  m["memory"] = {{"source", "counting_allocator"},
                 {"precision", "fp32"},
                 {"state_bytes", {{"parameters", 4e9}, {"gradients", 4e9}, {"optimizer", 8e9}}},
                 {"points", nlohmann::json::array(
                                {{{"micro_batch", 4}, {"seq_len", 1000}, {"peak_allocated_bytes", peak(4, 1000)}},
                                 {{"micro_batch", 2}, {"seq_len", 1000}, {"peak_allocated_bytes", peak(2, 1000)}},
                                 {{"micro_batch", 4}, {"seq_len", 500}, {"peak_allocated_bytes", peak(4, 500)}}})},
                 {"device_total_bytes", nullptr}};
  m["checkpoint_save"] = {{"bytes", 16e9}, {"seconds", 80.0}, {"gb_per_s", 0.2}};
  m["restore"] = {{"bytes", 16e9}, {"seconds", 40.0}, {"gb_per_s", 0.4}};
  return r;
}

}  // namespace anchor::plan::synthetic
