// The strict config loader: each rule valid and invalid, positions, overrides
// and precedence, JSON/YAML round trips, digest, seeds, paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/config/config.hpp"
#include "anchor/config/diff.hpp"
#include "support/temp_dir.hpp"

namespace {

using anchor::config::Config;
using anchor::config::ConfigError;
using anchor::config::Problem;
namespace cfg = anchor::config;

const std::string kMinimal = "data:\n  train: [a.txt]\n";

// The problems loading `yaml` gives (empty when it loads).
std::vector<Problem> problems_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    cfg::load_string(yaml, "t.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

std::string dump(const std::vector<Problem>& ps) {
  std::string out;
  for (const auto& p : ps) out += "  " + p.format() + "\n";
  return out;
}

// ---------------------------------------------------------------------------
// One rule per row: a config that breaks it (one problem, on `key`, whose
// message contains `needle`) and one that keeps it (loads).
struct Rule {
  const char* name;
  std::string bad;
  const char* key;
  const char* needle;
  std::string good;
};

std::string hex64(char c) { return std::string(64, c); }

std::vector<Rule> rules() {
  const std::string m = kMinimal;
  return {
      {"UnknownTopLevelKey", m + "trian:\n  micro_batch: 8\n", "trian", "did you mean 'train'?",
       m + "train:\n  micro_batch: 8\n"},
      {"UnknownNestedKey", m + "train:\n  micro_bach: 8\n", "train.micro_bach", "did you mean 'train.micro_batch'?",
       m + "train:\n  micro_batch: 8\n"},
      {"KeyInWrongSection", m + "train:\n  lr: 0.1\n", "train.lr", "did you mean 'train.optimizer.lr'?",
       m + "train:\n  optimizer:\n    lr: 0.1\n"},
      {"UnknownKeyListsAllowed", m + "pilot:\n  zzzz: 1\n", "pilot.zzzz",
       "'pilot' accepts: steps_before_save, steps_after_resume", m + "pilot:\n  eval_batches: 1\n"},
      {"DottedKeyInFile", m + "train.micro_batch: 8\n", "train.micro_batch", "dotted keys are for --set",
       m + "train: {micro_batch: 8}\n"},
      {"DuplicateKey", m + "train:\n  micro_batch: 8\n  micro_batch: 4\n", "train.micro_batch",
       "duplicate key (first on line 4)", m + "train:\n  micro_batch: 8\n"},
      {"SectionIsScalar", m + "train: 5\n", "train", "expected a mapping with keys", m + "train:\n"},
      {"IntWrongType", m + "train:\n  micro_batch: four\n", "train.micro_batch", "expected an integer, got 'four'",
       m + "train:\n  micro_batch: 4\n"},
      {"IntQuoted", m + "train:\n  micro_batch: '4'\n", "train.micro_batch", "got the quoted string '4'",
       m + "train:\n  micro_batch: 4\n"},
      {"IntFractional", m + "train:\n  micro_batch: 4.5\n", "train.micro_batch", "expected an integer",
       m + "train:\n  micro_batch: 4\n"},
      {"IntScientificWhole", m + "train:\n  total_tokens: 2.5e-1\n", "train.total_tokens", "expected an integer",
       m + "train:\n  total_tokens: 2.5e9\n"},
      {"IntOutOfRange", m + "train:\n  micro_batch: 0\n", "train.micro_batch", "must be >= 1, got 0",
       m + "train:\n  micro_batch: 1\n"},
      {"Int32Overflow", m + "model:\n  n_layer: 3000000000\n", "model.n_layer", "out of range for a 32-bit integer",
       m + "model:\n  n_layer: 3\n"},
      {"IntIsList", m + "train:\n  micro_batch: [4]\n", "train.micro_batch", "expected an integer, got a list",
       m + "train:\n  micro_batch: 4\n"},
      {"NullValue", m + "train:\n  micro_batch:\n", "train.micro_batch", "missing value",
       m + "train:\n  micro_batch: 2\n"},
      {"BoolWrongType", m + "run:\n  deterministic: yes\n", "run.deterministic", "expected a boolean (true or false)",
       m + "run:\n  deterministic: false\n"},
      {"UIntNegative", m + "run:\n  seed: -1\n", "run.seed", "expected an unsigned integer",
       m + "run:\n  seed: 18446744073709551615\n"},
      {"UIntTooLarge", m + "run:\n  seed: 18446744073709551616\n", "run.seed", "larger than the largest 64-bit value",
       m + "run:\n  seed: 0\n"},
      {"DoubleWrongType", m + "train:\n  optimizer:\n    lr: fast\n", "train.optimizer.lr", "expected a number",
       m + "train:\n  optimizer:\n    lr: 3e-4\n"},
      {"DoubleNotFinite", m + "train:\n  optimizer:\n    lr: .nan\n", "train.optimizer.lr", "expected a number",
       m + "train:\n  optimizer:\n    lr: 1\n"},
      {"DoubleExclusiveBound", m + "model:\n  dropout: 1.0\n", "model.dropout", "must be >= 0 and < 1, got 1",
       m + "model:\n  dropout: 0.0\n"},
      {"DoubleExclusiveLow", m + "train:\n  optimizer:\n    lr: 0\n", "train.optimizer.lr", "must be > 0 and <= 10",
       m + "train:\n  optimizer:\n    lr: 1e-6\n"},
      {"EnumNotAllowed", m + "train:\n  precision: fp8\n", "train.precision",
       "'fp8' is not allowed; allowed: fp32, bf16, fp16", m + "train:\n  precision: bf16\n"},
      {"EnumStrategy", m + "distributed:\n  strategy: fsdp\n", "distributed.strategy", "allowed: ddp, zero1, zero2",
       m + "distributed:\n  strategy: zero2\n"},
      {"Device", m + "device: gpu\n", "device", "allowed: cpu, cuda, cuda:N", m + "device: cuda:1\n"},
      {"DeviceIndex", m + "device: 'cuda:x'\n", "device", "is not a device", m + "device: auto\n"},
      {"RunName", m + "run:\n  name: a/b\n", "run.name", "not a usable run name",
       m + "run:\n  name: gpt2-small_v1.0\n"},
      {"OutputDirEmpty", m + "run:\n  output_dir: ''\n", "run.output_dir", "must not be empty",
       m + "run:\n  output_dir: /tmp/runs\n"},
      {"ContainerDigestPrefix", m + "container:\n  digest: " + hex64('a') + "\n", "container.digest",
       "expected 'sha256:' followed by 64 lowercase hex", m + "container:\n  digest: sha256:" + hex64('a') + "\n"},
      {"ContainerDigestUpper", m + "container:\n  digest: sha256:" + hex64('A') + "\n", "container.digest",
       "must be lowercase hex", m + "container:\n  digest: ''\n"},
      {"ContainerDigestShort", m + "container:\n  digest: sha256:abc\n", "container.digest",
       "has 3 hex characters after 'sha256:', expected 64",
       m + "container:\n  digest: sha256:" + hex64('0') + "\n  required: true\n"},
      {"StepsBeforeSave", m + "pilot:\n  steps_before_save: 1\n", "pilot.steps_before_save", "full optimizer state",
       m + "pilot:\n  steps_before_save: 2\n"},
      {"MissingTrain", "model:\n  n_layer: 2\n", "data.train", "missing required key", "model:\n  n_layer: 2\n" + m},
      {"EmptyTrain", "data:\n  train: []\n", "data.train", "at least one entry", "data:\n  train: [x]\n"},
      {"TrainNotList", "data:\n  train: a.txt\n", "data.train", "expected a list of strings",
       "data:\n  train:\n    - a.txt\n    - 'b/*.txt'\n"},
      {"TrainEmptyItem", "data:\n  train: [a.txt, '']\n", "data.train", "non-empty strings",
       "data:\n  train: [a.txt, b.txt]\n"},
      {"TrainItemIsMap", "data:\n  train: [{a: 1}]\n", "data.train", "got a mapping", "data:\n  train: [a]\n"},
      {"GlobalBatch", m + "train:\n  micro_batch: 4\n  grad_accum: 2\n  global_batch: 16\n", "train.global_batch",
       "4 * 2 * 1 = 8", m + "train:\n  micro_batch: 4\n  grad_accum: 2\n  global_batch: 8\n"},
      {"GlobalBatchRanks", m + "train:\n  micro_batch: 4\n  global_batch: 4\ndistributed:\n  nproc_per_node: 2\n",
       "train.global_batch", "4 * 1 * 2 = 8",
       m + "train:\n  micro_batch: 4\n  global_batch: 8\ndistributed:\n  nproc_per_node: 2\n"},
      {"BlockSizeBelowSeqLen", "data:\n  seq_len: 128\n  train: [a.txt]\n", "data.seq_len",
       "exceeds model.block_size 64", "data:\n  seq_len: 128\n  train: [a.txt]\nmodel:\n  block_size: 128\n"},
      {"SafetensorsNeedsWeights", m + "model:\n  source: safetensors\n", "model.source", "model.weights is not set",
       m + "model:\n  source: safetensors\n  weights: w.safetensors\n"},
      {"TorchscriptNeedsPath", m + "model:\n  source: torchscript\n", "model.source", "model.torchscript is not set",
       m + "model:\n  source: torchscript\n  torchscript: m.pt\n"},
      {"WeightsWithBuiltin", m + "model:\n  weights: w.safetensors\n", "model.weights", "set model.source: safetensors",
       m + "model:\n  source: builtin\n"},
      {"TorchscriptWithBuiltin", m + "model:\n  torchscript: m.pt\n", "model.torchscript",
       "set model.source: torchscript", m + "model:\n  torchscript: ''\n"},
      {"StepsAndTokens", m + "train:\n  total_steps: 100\n  total_tokens: 1000000\n", "train.total_tokens", "both set",
       m + "train:\n  total_tokens: 1000000\n"},
      {"EmbdDivisibleByHeads", m + "model:\n  n_embd: 66\n", "model.n_embd", "not divisible by model.n_head 4",
       m + "model:\n  n_embd: 68\n"},
      {"TextIsBytes", m + "model:\n  vocab_size: 50257\n", "model.vocab_size", "data.format text is bytes",
       m + "model:\n  vocab_size: 256\n"},
      {"LlmcIsUint16", "data:\n  format: llmc\n  train: [a.bin]\nmodel:\n  vocab_size: 70000\n", "model.vocab_size",
       "uint16", "data:\n  format: llmc\n  train: [a.bin]\nmodel:\n  vocab_size: 50257\n"},
      {"Fp16NeedsGpu", m + "train:\n  precision: fp16\n", "train.precision", "needs a GPU",
       m + "train:\n  precision: fp16\ndevice: cuda\n"},
      {"NcclNeedsGpu", m + "distributed:\n  backend: nccl\n", "distributed.backend", "needs a GPU",
       m + "distributed:\n  backend: nccl\ndevice: cuda:0\n"},
      {"ValidationData", m + "  val_fraction: 0\n", "data.val_fraction", "needs validation data",
       "data:\n  train: [a]\n  val: [b]\n  val_fraction: 0\n"},
      {"WarmupWithinRun", m + "train:\n  total_steps: 50\n", "train.total_steps", "exceeds train.total_steps 50",
       m + "train:\n  total_steps: 50\n  schedule:\n    warmup_steps: 5\n"},
      {"MemoryProbeSmaller", m + "pilot:\n  memory_probe_micro_batch: 4\n", "pilot.memory_probe_micro_batch",
       "must be smaller than train.micro_batch 4", m + "pilot:\n  memory_probe_micro_batch: 2\n"},
      {"ActivationCheckpointing", m + "train:\n  activation_checkpointing: 3\n", "train.activation_checkpointing",
       "exceeds model.n_layer 2", m + "train:\n  activation_checkpointing: 2\n"},
      {"CheckpointingNeedsBuiltin",
       m + "model:\n  source: torchscript\n  torchscript: m.pt\ntrain:\n  activation_checkpointing: 1\n",
       "train.activation_checkpointing", "needs the built-in model",
       m + "model:\n  source: torchscript\n  torchscript: m.pt\ntrain:\n  activation_checkpointing: 0\n"},
      {"TopLevelNotMap", "- a\n- b\n", "", "expected a mapping of sections", kMinimal},
      {"TwoDocuments", m + "---\n" + m, "", "more than one YAML document", m + "...\n"},
      {"SyntaxError", "data:\n  train: [a.txt\n", "", "YAML syntax error", kMinimal},
  };
}

void PrintTo(const Rule& r, std::ostream* os) { *os << r.name; }

class RuleTest : public ::testing::TestWithParam<Rule> {};

TEST_P(RuleTest, BadIsOneProblemGoodLoads) {
  const Rule& r = GetParam();
  auto bad = problems_of(r.bad);
  ASSERT_EQ(bad.size(), 1u) << "config:\n" << r.bad << "problems:\n" << dump(bad);
  EXPECT_EQ(bad[0].key, r.key) << bad[0].format();
  EXPECT_NE(bad[0].message.find(r.needle), std::string::npos)
      << "message: " << bad[0].message << "\nexpected to contain: " << r.needle;
  EXPECT_EQ(bad[0].file, "t.yaml");
  auto good = problems_of(r.good);
  EXPECT_TRUE(good.empty()) << "config:\n" << r.good << "problems:\n" << dump(good);
}

INSTANTIATE_TEST_SUITE_P(Config, RuleTest, ::testing::ValuesIn(rules()),
                         [](const auto& info) { return std::string(info.param.name); });

// model.attention sdpa is checked against the LibTorch this build links: on
// 1.13 it is refused, naming the version and the way out; on 2.x accepted.
// auto and manual load everywhere; anything else is not a choice.
TEST(ConfigLoad, AttentionSdpaNeedsALibTorchThatHasIt) {
  const auto sdpa = problems_of(kMinimal + "model:\n  attention: sdpa\n");
  if (anchor::build::kLibTorchHasSdpa) {
    EXPECT_TRUE(sdpa.empty()) << dump(sdpa);
  } else {
    ASSERT_EQ(sdpa.size(), 1u) << dump(sdpa);
    EXPECT_EQ(sdpa[0].key, "model.attention");
    EXPECT_NE(sdpa[0].message.find("needs LibTorch 2.0 or newer"), std::string::npos) << sdpa[0].message;
    EXPECT_NE(sdpa[0].message.find(anchor::build::kLibTorchVersion), std::string::npos) << sdpa[0].message;
  }
  EXPECT_TRUE(problems_of(kMinimal + "model:\n  attention: manual\n").empty());
  EXPECT_TRUE(problems_of(kMinimal + "model:\n  attention: auto\n").empty());
  const auto typo = problems_of(kMinimal + "model:\n  attention: flash\n");
  ASSERT_EQ(typo.size(), 1u) << dump(typo);
  EXPECT_EQ(typo[0].key, "model.attention");
}

// ---------------------------------------------------------------------------

TEST(ConfigLoad, ThreeMistakesGiveThreeProblemsWithPositions) {
  const std::string yaml =
      "run:\n"
      "  threads: 0\n"  // line 2: value at column 12
      "model:\n"
      "  n_layr: 4\n"  // line 4: key at column 3
      "data:\n"
      "  train: [a.txt]\n"
      "train:\n"
      "  precision: fp8\n";  // line 8: value at column 14
  try {
    cfg::load_string(yaml, "bad.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config bad.yaml has 3 problems");
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig);
    EXPECT_EQ(anchor::exit_code_for(e.kind()), anchor::ExitCode::kUsage);
    EXPECT_NE(e.hint().find("docs/config.md"), std::string::npos);
    ASSERT_EQ(e.problems().size(), 3u) << dump(e.problems());
    const auto& p = e.problems();
    EXPECT_EQ(p[0].format(), "bad.yaml:2:12: run.threads: must be >= 1 and <= 1024, got 0");
    EXPECT_EQ(p[1].line, 4);
    EXPECT_EQ(p[1].column, 3);
    EXPECT_EQ(p[1].key, "model.n_layr");
    EXPECT_NE(p[1].message.find("did you mean 'model.n_layer'?"), std::string::npos);
    EXPECT_EQ(p[2].format(), "bad.yaml:8:14: train.precision: 'fp8' is not allowed; allowed: fp32, bf16, fp16");
  }
}

TEST(ConfigLoad, OneProblemIsSingular) {
  try {
    cfg::load_string("", "empty.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config empty.yaml has 1 problem");
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0].format(),
              "empty.yaml: data.train: missing required key; expected a list of strings, e.g. "
              "[a.txt, b.txt]");
  }
}

TEST(ConfigLoad, SyntaxErrorHasPosition) {
  auto ps = problems_of("data:\n  train: [a.txt\nmodel:\n  n_layer: 2\n");
  ASSERT_EQ(ps.size(), 1u) << dump(ps);
  EXPECT_GT(ps[0].line, 1);
  EXPECT_GT(ps[0].column, 0);
  EXPECT_EQ(ps[0].key, "");
  EXPECT_EQ(ps[0].format().rfind("t.yaml:" + std::to_string(ps[0].line) + ":", 0), 0u);
}

TEST(ConfigLoad, ABadValueDoesNotAlsoReportAContradiction) {
  // micro_batch is rejected, so the global_batch rule (which needs it) stays quiet.
  auto ps = problems_of(kMinimal + "train:\n  micro_batch: x\n  global_batch: 3\n");
  ASSERT_EQ(ps.size(), 1u) << dump(ps);
  EXPECT_EQ(ps[0].key, "train.micro_batch");
}

TEST(ConfigLoad, EmptySectionsUseDefaults) {
  Config c = cfg::load_string(kMinimal + "pilot:\nbudget: {}\n");
  EXPECT_EQ(c.pilot.steps_before_save, Config{}.pilot.steps_before_save);
  EXPECT_EQ(c.budget.nodes, 1);
}

TEST(ConfigLoad, ParsesEveryType) {
  Config c = cfg::load_string(kMinimal +
                              "run:\n  seed: 18446744073709551615\n  deterministic: false\n"
                              "train:\n  total_tokens: 2.5e9\n  optimizer:\n    lr: 3e-4\n"
                              "budget:\n  devices: [H100-80GB, MI300X]\n");
  EXPECT_EQ(c.run.seed, 18446744073709551615ull);
  EXPECT_FALSE(c.run.deterministic);
  EXPECT_EQ(c.train.total_tokens, 2500000000);
  EXPECT_EQ(c.train.optimizer.lr, 3e-4);
  EXPECT_EQ(c.budget.devices, (std::vector<std::string>{"H100-80GB", "MI300X"}));
  EXPECT_EQ(c.data.train, std::vector<std::string>{"a.txt"});
}

// ---------------------------------------------------------------------------
// Overrides and precedence

TEST(ConfigOverrides, PrecedenceDefaultsFileOverrides) {
  const std::string yaml = kMinimal + "train:\n  micro_batch: 2\n  grad_accum: 3\n";
  Config c = cfg::load_string(yaml, "t.yaml", {"train.grad_accum=5"});
  EXPECT_EQ(c.train.micro_batch, 2);                             // file over default
  EXPECT_EQ(c.train.grad_accum, 5);                              // override over file
  EXPECT_EQ(c.train.optimizer.lr, Config{}.train.optimizer.lr);  // default
  // Negative control: without the override the file's value stands.
  EXPECT_EQ(cfg::load_string(yaml).train.grad_accum, 3);
}

TEST(ConfigOverrides, LaterOverrideWins) {
  Config c = cfg::load_string(kMinimal, "t.yaml", {"train.micro_batch=2", "train.micro_batch=8"});
  EXPECT_EQ(c.train.micro_batch, 8);
}

TEST(ConfigOverrides, ListsStringsAndEmptyValues) {
  Config c = cfg::load_string(
      kMinimal + "report:\n  signing_key: k.pem\n", "t.yaml",
      {"data.train=[x.txt, 'y/*.txt']", "report.signing_key=", "run.name=exp-1", "device=cuda:0", "model.dropout=0"});
  EXPECT_EQ(c.data.train, (std::vector<std::string>{"x.txt", "y/*.txt"}));
  EXPECT_EQ(c.report.signing_key, "");
  EXPECT_EQ(c.run.name, "exp-1");
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.model.dropout, 0.0);
}

// Issue 14: `--set key=` took a shortcut that skipped the checks, so
// `--set run.output_dir=` put run directories at / and `config check` passed
// an empty device, precision or architecture.
TEST(ConfigOverrides, EmptyOverridesOfStringKeysAreChecked) {
  auto ps = problems_of(kMinimal, {"run.output_dir=", "device=", "train.precision=", "model.arch=", "run.name=  "});
  ASSERT_EQ(ps.size(), 5u) << dump(ps);
  const char* keys[] = {"run.output_dir", "device", "train.precision", "model.arch", "run.name"};
  const char* needles[] = {"must not be empty", "is not a device", "allowed: fp32, bf16, fp16", "allowed: gpt",
                           "not a usable run name"};
  for (std::size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps[i].file, "--set");
    EXPECT_EQ(ps[i].key, keys[i]);
    EXPECT_NE(ps[i].message.find(needles[i]), std::string::npos) << ps[i].format();
  }
  // Negative control: keys whose empty value means something still empty.
  Config c = cfg::load_string("data: {train: [a.txt], val: [v.txt]}\nreport: {signing_key: k.pem}\n", "t.yaml",
                              {"report.signing_key=", "checkpoint.dir=", "container.digest=", "data.val="});
  EXPECT_EQ(c.report.signing_key, "");
  EXPECT_TRUE(c.data.val.empty());
}

// Every string and list key: `--set key=` gets the verdict an explicit empty
// value ('' or []) gets, the value a file would carry.
TEST(ConfigOverrides, AnEmptyOverrideIsCheckedLikeAnExplicitEmptyValue) {
  // The dotted keys from the effective config's nesting (at most three levels).
  std::vector<std::pair<std::string, nlohmann::json>> all;
  const nlohmann::json defaults = cfg::to_json(Config{});  // named: items() refers into it
  for (const auto& top : defaults.items()) {
    if (!top.value().is_object()) {
      all.push_back({top.key(), top.value()});
      continue;
    }
    for (const auto& mid : top.value().items()) {
      if (!mid.value().is_object()) {
        all.push_back({top.key() + "." + mid.key(), mid.value()});
        continue;
      }
      for (const auto& leaf : mid.value().items())
        all.push_back({top.key() + "." + mid.key() + "." + leaf.key(), leaf.value()});
    }
  }
  int refused = 0;
  for (const auto& [key, v] : all) {
    if (!v.is_string() && !v.is_array()) continue;
    auto shortcut = problems_of(kMinimal, {key + "="});
    auto explicit_empty = problems_of(kMinimal, {key + "=" + (v.is_string() ? "''" : "[]")});
    ASSERT_EQ(shortcut.size(), explicit_empty.size()) << key << "\n--set " << key << "=:\n"
                                                      << dump(shortcut) << "explicit:\n"
                                                      << dump(explicit_empty);
    for (std::size_t i = 0; i < shortcut.size(); ++i) {
      EXPECT_EQ(shortcut[i].key, explicit_empty[i].key);
      EXPECT_EQ(shortcut[i].message.rfind(explicit_empty[i].message, 0), 0u) << shortcut[i].format() << "\nvs\n"
                                                                             << explicit_empty[i].format();
    }
    if (!shortcut.empty()) ++refused;
  }
  EXPECT_GE(refused, 10);  // run.name, run.output_dir, device, every one_of key, data.train
}

TEST(ConfigOverrides, OverrideCanSupplyRequiredKey) {
  Config c = cfg::load_string("", "t.yaml", {"data.train=[a.txt]"});
  EXPECT_EQ(c.data.train, std::vector<std::string>{"a.txt"});
}

TEST(ConfigOverrides, ProblemsAreReportedAgainstSet) {
  auto ps = problems_of(kMinimal, {"train.micro_bach=8", "train.micro_batch=x", "noequals", "train=5",
                                   "data.train=", "trian.grad_accum=2"});
  ASSERT_EQ(ps.size(), 6u) << dump(ps);
  for (const auto& p : ps) {
    EXPECT_EQ(p.file, "--set");
    EXPECT_EQ(p.line, 0);
  }
  EXPECT_EQ(ps[0].key, "train.micro_bach");
  EXPECT_NE(ps[0].message.find("did you mean 'train.micro_batch'?"), std::string::npos);
  EXPECT_EQ(ps[1].format(), "--set: train.micro_batch: expected an integer, got 'x'");
  EXPECT_NE(ps[2].message.find("expected key=value"), std::string::npos);
  EXPECT_NE(ps[3].message.find("is a section"), std::string::npos);
  EXPECT_EQ(ps[4].key, "data.train");
  EXPECT_NE(ps[5].message.find("did you mean 'train.grad_accum'?"), std::string::npos);
}

TEST(ConfigOverrides, ContradictionsSeeTheMergedConfig) {
  const std::string yaml = kMinimal + "train:\n  micro_batch: 4\n  grad_accum: 2\n  global_batch: 8\n";
  EXPECT_TRUE(problems_of(yaml).empty());
  auto ps = problems_of(yaml, {"train.micro_batch=8"});
  ASSERT_EQ(ps.size(), 1u) << dump(ps);
  EXPECT_EQ(ps[0].key, "train.global_batch");
  EXPECT_EQ(ps[0].line, 6);  // the file's global_batch line
  EXPECT_TRUE(problems_of(yaml, {"train.micro_batch=8", "train.global_batch=0"}).empty());
}

TEST(ConfigOverrides, FileProblemsStayReportedWhenOverridden) {
  // The file must be valid on its own; an override does not hide its mistakes.
  auto ps = problems_of(kMinimal + "train:\n  micro_batch: x\n", {"train.micro_batch=4"});
  ASSERT_EQ(ps.size(), 1u) << dump(ps);
  EXPECT_EQ(ps[0].file, "t.yaml");
}

// ---------------------------------------------------------------------------
// Round trips and digest

Config unusual_config() {
  return cfg::load_string(
      "run:\n  name: rt.1\n  seed: 18446744073709551615\n  threads: 3\n  deterministic: false\n"
      "model:\n  source: safetensors\n  weights: 'w eights: x.safetensors'\n  dropout: 0.1\n"
      "  n_embd: 96\n  n_head: 6\n  bias: false\n"
      "data:\n  format: llmc\n  train: ['shards/train_*.bin', \"#odd.bin\"]\n  val: []\n"
      "  val_fraction: 0.3333333333333333\n  seq_len: 48\n"
      "train:\n  total_tokens: 123456789\n  precision: bf16\n"
      "  optimizer: {lr: 3.0e-4, eps: 1e-12, beta2: 0.999}\n"
      "device: cuda:3\ncontainer: {digest: 'sha256:" +
          hex64('f') +
          "', required: true}\n"
          "budget:\n  devices: [A100-80GB]\n  headroom: 0.15\n",
      "rt.yaml");
}

TEST(ConfigSerialise, JsonRoundTrip) {
  Config c = unusual_config();
  nlohmann::json j = cfg::to_json(c);
  Config back = cfg::from_json(j, "/some/dir");
  EXPECT_EQ(cfg::to_json(back), j);
  EXPECT_EQ(back.base_dir, "/some/dir");
  EXPECT_EQ(back.run.seed, 18446744073709551615ull);
  EXPECT_EQ(back.data.val_fraction, 0.3333333333333333);
  EXPECT_EQ(back.model.weights, "w eights: x.safetensors");
  // Negative control: a changed value shows in the JSON.
  back.train.optimizer.eps = 1e-11;
  EXPECT_NE(cfg::to_json(back), j);
}

TEST(ConfigSerialise, JsonIsNestedAndExcludesLocation) {
  Config c = cfg::load_string(kMinimal);
  nlohmann::json j = cfg::to_json(c);
  EXPECT_EQ(j["train"]["optimizer"]["lr"], Config{}.train.optimizer.lr);
  EXPECT_EQ(j["train"]["loss_scale"]["growth_interval"], 2000);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_FALSE(j.contains("source_path"));
  EXPECT_FALSE(j.contains("base_dir"));
  for (const char* s : {"run", "model", "data", "train", "pilot", "device", "distributed", "checkpoint", "report",
                        "export", "container", "budget", "program"})
    EXPECT_TRUE(j.contains(s)) << s;
  EXPECT_EQ(j.size(), 13u);
}

TEST(ConfigSerialise, FromJsonValidates) {
  nlohmann::json j = cfg::to_json(cfg::load_string(kMinimal));
  j["train"]["micro_batch"] = 0;
  j["train"]["extra"] = 1;
  try {
    cfg::from_json(j);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u) << dump(e.problems());
    EXPECT_EQ(e.problems()[0].file, "<json>");
  }
}

TEST(ConfigSerialise, YamlRoundTrip) {
  Config c = unusual_config();
  std::string y = cfg::to_yaml(c);
  EXPECT_EQ(y.rfind("# anchor effective config", 0), 0u) << y;
  EXPECT_NE(y.find("\ntrain:\n"), std::string::npos) << y;
  EXPECT_NE(y.find("\n  optimizer:\n"), std::string::npos) << y;
  Config back = cfg::load_string(y, "dumped.yaml");
  EXPECT_EQ(cfg::to_json(back), cfg::to_json(c)) << y;
}

TEST(ConfigSerialise, DefaultsYamlRoundTrip) {
  Config c = cfg::load_string(kMinimal);
  Config back = cfg::load_string(cfg::to_yaml(c));
  EXPECT_EQ(cfg::digest(back), cfg::digest(c));
}

TEST(ConfigDigest, IsSha256OfCanonicalJson) {
  Config c = cfg::load_string(kMinimal);
  EXPECT_EQ(cfg::digest(c), anchor::sha256_hex(cfg::to_json(c).dump()));
  EXPECT_TRUE(anchor::is_sha256_hex(cfg::digest(c)));
}

TEST(ConfigDigest, StableAcrossSpellingAndLocation) {
  // Same effective config written differently, loaded from different places.
  Config a = cfg::load_string("data:\n  train: [a.txt]\ntrain:\n  micro_batch: 4  # default\n", "a.yaml", {}, "/x");
  Config b = cfg::load_string("# comment\ntrain: {micro_batch: 4}\ndata:\n  train:\n    - a.txt\n", "b.yaml", {}, "/y");
  EXPECT_EQ(cfg::digest(a), cfg::digest(b));
  EXPECT_EQ(cfg::digest(a), cfg::digest(cfg::from_json(cfg::to_json(a))));
  // Negative control.
  Config d = cfg::load_string(kMinimal, "t.yaml", {"train.micro_batch=5"});
  EXPECT_NE(cfg::digest(a), cfg::digest(d));
}

TEST(ConfigDigest, ChangesWithEveryKey) {
  // Sensitivity: perturbing any one key changes the digest. Goes through
  // to_json and back so the test needs no knowledge of the struct layout.
  const Config base = cfg::load_string(kMinimal);
  const nlohmann::json j0 = cfg::to_json(base);
  const std::string d0 = cfg::digest(base);
  int leaves = 0;
  const nlohmann::json flat0 = j0.flatten();
  for (const auto& item : flat0.items()) {
    nlohmann::json flat = flat0;
    auto& v = flat[item.key()];
    if (v.is_boolean())
      v = !v.get<bool>();
    else if (v.is_number_unsigned())
      v = v.get<std::uint64_t>() + 1;
    else if (v.is_number_integer())
      v = v.get<std::int64_t>() + 1;
    else if (v.is_number_float())
      v = v.get<double>() + 1.0;
    else if (v.is_string())
      v = v.get<std::string>() + "x";
    else if (v.is_null())
      v = "x";  // an empty list flattens to null
    ++leaves;
    nlohmann::json changed = flat.unflatten();
    EXPECT_NE(anchor::sha256_hex(changed.dump()), d0) << item.key();
    EXPECT_NE(changed, j0) << item.key();
  }
  EXPECT_GT(leaves, 60);
}

TEST(ConfigSeeds, DerivedSeedsAreStableAndIndependent) {
  // Values from Python:
  //   int.from_bytes(hashlib.sha256(root.to_bytes(8, "little") + purpose).digest()[:8], "little")
  EXPECT_EQ(cfg::derive_seed(1234, "init"), 2938472384887721314ull);
  EXPECT_EQ(cfg::derive_seed(1234, "data"), 16120225672212442586ull);
  EXPECT_EQ(cfg::derive_seed(0, ""), 8794265229978523055ull);
  EXPECT_NE(cfg::derive_seed(1235, "init"), cfg::derive_seed(1234, "init"));
}

// ---------------------------------------------------------------------------
// Files and paths

class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_ / "sub"); }
  std::string write(const std::string& rel, const std::string& text) {
    auto p = dir_ / rel;
    std::ofstream(p) << text;
    return p.string();
  }
  anchor::testing::TempDir tmp_{"config"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_F(ConfigFiles, BaseDirAndResolvePath) {
  std::string path = write("sub/c.yaml",
                           "data:\n  train: ['../data/*.txt']\nmodel:\n  source: torchscript\n"
                           "  torchscript: /abs/m.pt\nreport:\n  signing_key: keys/k.pem\n");
  Config c = cfg::load(path);
  EXPECT_EQ(c.source_path, path);
  EXPECT_EQ(c.base_dir, (dir_ / "sub").string());
  EXPECT_EQ(c.data.train[0], "../data/*.txt");  // kept as written
  EXPECT_EQ(cfg::resolve_path(c, c.data.train[0]), (dir_ / "data/*.txt").string());
  EXPECT_EQ(cfg::resolve_path(c, c.model.torchscript), "/abs/m.pt");
  EXPECT_EQ(cfg::resolve_path(c, c.report.signing_key), (dir_ / "sub/keys/k.pem").string());
  EXPECT_EQ(cfg::resolve_path(c, ""), "");
}

TEST_F(ConfigFiles, RelativePathToConfigGivesAbsoluteBaseDir) {
  write("sub/c.yaml", kMinimal);
  auto old = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  Config c = cfg::load("sub/c.yaml");
  std::filesystem::current_path(old);
  EXPECT_EQ(c.source_path, "sub/c.yaml");
  EXPECT_EQ(c.base_dir, (dir_ / "sub").string());
}

TEST_F(ConfigFiles, MissingDataFilesAreNotAConfigError) {
  std::string path = write("c.yaml", "data:\n  train: [does/not/exist-*.txt]\n");
  EXPECT_NO_THROW(cfg::load(path));
}

TEST_F(ConfigFiles, ProblemsNameTheFile) {
  std::string path = write("c.yaml", kMinimal + "train:\n  micro_batch: 0\n");
  try {
    cfg::load(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config " + path + " has 1 problem");
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0].format(), path + ":4:16: train.micro_batch: must be >= 1, got 0");
  }
}

TEST_F(ConfigFiles, MissingFileIsIoErrorNamingPath) {
  std::string path = (dir_ / "nope.yaml").string();
  try {
    cfg::load(path);
    FAIL() << "expected Error";
  } catch (const ConfigError&) {
    FAIL() << "a missing file is an I/O error, not a config problem";
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST_F(ConfigFiles, DirectoryIsIoError) {
  try {
    cfg::load(dir_.string());
    FAIL() << "expected Error";
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
}

// Regression (fuzz_config): very long scalars where a number or a name is
// expected exhausted memory inside std::regex. They must be ordinary problems.
TEST(ConfigLoad, VeryLongScalarsAreOrdinaryProblems) {
  const std::string digits(5000, '7');
  const std::string name(5000, 'a');
  try {
    cfg::load_string(kMinimal + "train: {micro_batch: " + digits + ", optimizer: {lr: " + digits +
                     "}}\nrun: {name: " + name + "}\ndevice: cuda:" + digits + "\n");
    FAIL() << "expected problems";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 4u) << e.what();
  }
}

// Regression (fuzz_config): this input made yaml-cpp's LoadAll produce
// documents until memory ran out. It must load (or be rejected) promptly.
TEST(ConfigLoad, FuzzFoundLoadAllRunawayIsBounded) {
  const std::string text =
      anchor::fs::read_file(std::string(ANCHOR_SOURCE_DIR) + "/tests/fuzz/corpus/config/regression-loadall-oom.yaml");
  try {
    cfg::load_string(text, "regression.yaml");
  } catch (const ConfigError& e) {
    EXPECT_FALSE(e.problems().empty());
  }
}

TEST(ConfigLoad, TwoDocumentsAreOneProblemAtTheSecond) {
  try {
    cfg::load_string(kMinimal + "---\nrun: {seed: 1}\n", "two.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_NE(e.problems()[0].message.find("more than one YAML document"), std::string::npos);
    EXPECT_EQ(e.problems()[0].line, 3);
  }
}

// Regression (fuzz_config): a string that is not UTF-8 was accepted, and then
// the config's digest (JSON) threw. It is a problem with its position.
TEST(ConfigLoad, NonUtf8StringsAreProblems) {
  try {
    cfg::load_string("data:\n  train: [\"a\xF9.txt\"]\nrun: {name: \"x\xC3\"}\n", "utf8.yaml");
    FAIL() << "expected problems";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u) << e.what();
    EXPECT_NE(e.problems()[0].message.find("not valid UTF-8"), std::string::npos) << e.problems()[0].message;
    EXPECT_NE(e.problems()[1].message.find("not valid UTF-8"), std::string::npos) << e.problems()[1].message;
  }
  // Negative control: valid multi-byte UTF-8 loads.
  EXPECT_EQ(cfg::load_string(kMinimal + "run: {output_dir: \"r\u00e9sultats\"}\n").run.output_dir, "r\u00e9sultats");
}

// Issue 14: YAML's "\0" escape put a NUL byte inside a path; open() and
// friends then saw "a" where the config (and its digest) said "a\0b.txt". Every
// string value with one is a problem at its position, list entries included.
TEST(ConfigLoad, NulBytesInValuesAreProblemsAtTheirPosition) {
  const std::string yaml =
      "data:\n"
      "  train: [a.txt, \"a\\0b.txt\"]\n"                     // line 2
      "model: {source: safetensors, weights: \"w\\0.st\"}\n"  // line 3
      "checkpoint:\n"
      "  dir: \"ckpt\\0\"\n"                               // line 5
      "run: {output_dir: \"\\0runs\", name: \"a\\0\"}\n"   // line 6
      "report: {signing_key: \"k.pem\\0/etc/passwd\"}\n";  // line 7
  try {
    cfg::load_string(yaml, "nul.yaml");
    FAIL() << "expected problems";
  } catch (const ConfigError& e) {
    const auto& ps = e.problems();
    ASSERT_EQ(ps.size(), 6u) << e.what() << "\n" << dump(ps);
    const std::vector<std::tuple<std::string, int, int>> expected = {
        {"data.train", 2, 18},     {"model.weights", 3, 39}, {"checkpoint.dir", 5, 8},
        {"run.output_dir", 6, 19}, {"run.name", 6, 35},      {"report.signing_key", 7, 23}};
    for (std::size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(ps[i].file, "nul.yaml");
      EXPECT_EQ(std::make_tuple(ps[i].key, ps[i].line, ps[i].column), expected[i]) << ps[i].format();
      EXPECT_NE(ps[i].message.find("NUL byte"), std::string::npos) << ps[i].format();
      EXPECT_EQ(ps[i].format().find('\0'), std::string::npos) << "the message must not carry the NUL";
    }
  }
  // Negative control: the same file without the NULs loads.
  std::string clean = yaml;
  for (std::string::size_type at; (at = clean.find("\\0")) != std::string::npos;) clean.erase(at, 2);
  EXPECT_NO_THROW(cfg::load_string(clean, "clean.yaml"));
}

TEST(ConfigLoad, NulBytesAreRefusedFromSetAndJson) {
  auto ps = problems_of(kMinimal, {"checkpoint.dir=\"ck\\0pt\"", "data.val=[\"v\\0.txt\"]", "device=\"cpu\\0\""});
  ASSERT_EQ(ps.size(), 3u) << dump(ps);
  for (const auto& p : ps) {
    EXPECT_EQ(p.file, "--set");
    EXPECT_NE(p.message.find("NUL byte"), std::string::npos) << p.format();
  }
  // from_json (reproduce, the workers): JSON's \u0000 is the same byte.
  nlohmann::json j = cfg::to_json(cfg::load_string(kMinimal));
  j["model"]["weights"] = std::string("w\0.safetensors", 14);
  j["model"]["source"] = "safetensors";
  try {
    cfg::from_json(j, "/base");
    FAIL() << "expected a problem";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0].key, "model.weights");
    EXPECT_EQ(e.problems()[0].file, "<json>");
  }
  // The base directory relative paths resolve against (a manifest's config.base_dir).
  j["model"]["weights"] = "w.safetensors";
  EXPECT_NO_THROW(cfg::from_json(j, "/base"));
  try {
    cfg::from_json(j, std::string("/ba\0se", 6));
    FAIL() << "expected a problem";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0].key, "base_dir");
  }
}

}  // namespace

// program.command (issue 15): data.train is then optional (also as an empty
// list, as to_json writes it), and program.env is NAME=VALUE without the
// variables anchor sets itself.
TEST(ConfigProgram, DataIsOptionalForAProgramAndEnvIsChecked) {
  cfg::Config c = cfg::load_string("program:\n  command: [python3, train.py]\n", "p.yaml");
  EXPECT_EQ(c.program.command.size(), 2u);
  EXPECT_TRUE(c.data.train.empty());
  EXPECT_NO_THROW(cfg::from_json(cfg::to_json(c)));  // data.train: [] read back (anchor pin --check)
  // Negative control: without a program, data.train is required, empty or absent.
  EXPECT_THROW(cfg::load_string("run:\n  name: x\n", "p.yaml"), cfg::ConfigError);
  EXPECT_THROW(cfg::load_string("data:\n  train: []\n", "p.yaml"), cfg::ConfigError);
  try {
    cfg::load_string("program:\n  command: [python3]\n  env: [OK=1, 'BAD NAME=1', RANK=3, '=x']\n", "p.yaml");
    FAIL() << "bad program.env entries must be refused";
  } catch (const cfg::ConfigError& e) {
    std::string all;
    for (const auto& p : e.problems()) all += p.format() + "\n";
    EXPECT_NE(all.find("'BAD NAME=1' is not NAME=VALUE"), std::string::npos) << all;
    EXPECT_NE(all.find("sets RANK, which anchor sets"), std::string::npos) << all;
  }
  // pilot.resume_world_size: a program's (DCP reshards its checkpoint); the built-in trainer is refused.
  c = cfg::load_string("program:\n  command: [python3]\npilot:\n  resume_world_size: 1\n", "p.yaml");
  EXPECT_EQ(c.pilot.resume_world_size, 1);
  try {
    cfg::load_string("data:\n  train: [a.bin]\npilot:\n  resume_world_size: 1\n", "p.yaml");
    FAIL() << "the built-in trainer resumes at the world size it saved at";
  } catch (const cfg::ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_NE(e.problems()[0].format().find("pilot.resume_world_size is for a program pilot"), std::string::npos)
        << e.problems()[0].format();
  }
}

namespace {

namespace cfg2 = anchor::config;

// `anchor diff`'s comparison: every key, paths as they resolve, and which differences decide the result.
TEST(ConfigDiff, NamesEveryDifferingKeyAndWhetherItDecidesTheResult) {
  const std::string yaml = "data:\n  train: [data/train.bin]\n  format: llmc\n";
  const auto past = cfg2::load_string(yaml, "a.yaml", {}, "/runs/a");
  const auto past_json = cfg2::to_json(past);
  // The same config, in the same directory: nothing differs (the negative control).
  EXPECT_TRUE(cfg2::diff(past_json, "/runs/a", cfg2::load_string(yaml, "a.yaml", {}, "/runs/a")).empty());
  // A training key and a planning key.
  auto d = cfg2::diff(past_json, "/runs/a",
                      cfg2::load_string(yaml, "a.yaml", {"train.micro_batch=8", "budget.nodes=2"}, "/runs/a"));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "train.micro_batch");
  EXPECT_EQ(d[0].past, past_json["train"]["micro_batch"]);
  EXPECT_EQ(d[0].now, 8);
  EXPECT_TRUE(d[0].decides_result);
  EXPECT_TRUE(d[0].past_resolved.is_null());
  EXPECT_EQ(d[1].key, "budget.nodes");
  EXPECT_FALSE(d[1].decides_result);
  // The same relative path from another directory is another file; another spelling of the same file is not.
  d = cfg2::diff(past_json, "/runs/a", cfg2::load_string(yaml, "a.yaml", {}, "/elsewhere"));
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0].key, "data.train");
  EXPECT_EQ(d[0].past, d[0].now);
  EXPECT_EQ(d[0].past_resolved, nlohmann::json::array({"/runs/a/data/train.bin"}));
  EXPECT_EQ(d[0].now_resolved, nlohmann::json::array({"/elsewhere/data/train.bin"}));
  const auto same_file =
      cfg2::load_string("data:\n  train: [../a/data/./train.bin]\n  format: llmc\n", "b.yaml", {}, "/runs/b");
  d = cfg2::diff(past_json, "/runs/a", same_file);
  for (const auto& x : d) EXPECT_NE(x.key, "data.train") << "resolves to the same file";
  // A key an older anchor did not write is absent in the past, not equal; at its default it decides nothing.
  auto older = past_json;
  older["train"].erase("micro_batch");
  d = cfg2::diff(older, "/runs/a", past);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].past.is_null());
  EXPECT_FALSE(d[0].decides_result);
  d = cfg2::diff(older, "/runs/a", cfg2::load_string(yaml, "a.yaml", {"train.micro_batch=8"}, "/runs/a"));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].decides_result) << "not the default: the past run cannot have had it";
  // Without an absolute past directory, paths are compared as written.
  EXPECT_TRUE(cfg2::diff(past_json, "", cfg2::load_string(yaml, "a.yaml", {}, "/elsewhere")).empty());
  // report.signing_key '' (the per-user key) and none are not paths: the same from any directory.
  for (const std::string key : {"", "none"}) {
    const std::string set = "report.signing_key=" + key;
    d = cfg2::diff(cfg2::to_json(cfg2::load_string(yaml, "a.yaml", {set}, "/runs/a")), "/runs/a",
                   cfg2::load_string(yaml, "a.yaml", {set}, "/elsewhere"));
    for (const auto& x : d) EXPECT_NE(x.key, "report.signing_key") << "'" << key << "'";
  }
  d = cfg2::diff(cfg2::to_json(cfg2::load_string(yaml, "a.yaml", {"report.signing_key=k.pem"}, "/runs/a")), "/runs/a",
                 cfg2::load_string(yaml, "a.yaml", {"report.signing_key=k.pem"}, "/elsewhere"));
  EXPECT_TRUE(std::any_of(d.begin(), d.end(), [](const auto& x) { return x.key == "report.signing_key"; }))
      << "the control: a key file named relative to another directory is another file";
  // pilot.* decides (the pilot's steps and evals); budget.* does not.
  d = cfg2::diff(past_json, "/runs/a", cfg2::load_string(yaml, "a.yaml", {"pilot.eval_batches=7"}, "/runs/a"));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].decides_result);
}

}  // namespace
