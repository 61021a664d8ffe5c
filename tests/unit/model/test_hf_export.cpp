// export.hf (docs/models.md, "Export"): the built-in GPT's weights in Hugging
// Face's GPT-2 layout. anchor reads its own export back bitwise as
// model.weights; transformers' GPT2LMHeadModel (pinned in
// requirements/torch2.txt) loads it with every tensor taken and gives the same
// logits (negative control: one square weight left in torch's orientation
// loads, and the logits differ); the directory is replaced whole or not at all.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "../../support/run_anchor.hpp"
#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/model/torch_tensors.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"
#include "anchor/model/gpt.hpp"
#include "anchor/model/hf_export.hpp"

namespace {

using namespace anchor;
namespace stdfs = std::filesystem;

config::ModelConfig small(int vocab = 256, bool bias = true) {
  config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 32;
  m.vocab_size = vocab;
  m.block_size = 32;
  m.dropout = 0.0;
  m.bias = bias;
  m.attention = "manual";
  return m;
}

model::Gpt seeded(const config::ModelConfig& m, int seed) {
  torch::manual_seed(seed);
  model::Gpt g(model::GptOptions::from(m));
  // Biases start at zero; give them values so a bias mapped wrong shows.
  torch::NoGradGuard no_grad;
  for (auto& p : g->named_parameters())
    if (p.key().find(".bias") != std::string::npos) p.value().normal_(0.0, 0.1);
  return g;
}

model::HfExport export_to(model::Gpt& g, const std::string& dir) {
  return model::export_gpt2_hf(g->named_parameters(), g->options(), dir);
}

nlohmann::json read_json_file(const std::string& path) { return nlohmann::json::parse(fs::read_file(path)); }

TEST(HfExport, ItsOwnExportReadsBackBitwiseAsModelWeights) {
  anchor::testing::TempDir tmp("hf-export");
  auto src = seeded(small(), 1);
  const auto out = export_to(src, tmp.str("export"));
  ASSERT_EQ(out.files.size(), 4u);
  EXPECT_EQ(out.files[0].name, "model.safetensors");
  EXPECT_EQ(out.files[1].name, "config.json");
  EXPECT_EQ(out.files[2].name, "generation_config.json");
  EXPECT_EQ(out.files[3].name, "README.md");
  std::uint64_t bytes = 0;
  for (const auto& f : out.files) {
    const auto d = sha256_file(tmp.str("export/" + f.name));
    EXPECT_EQ(d.sha256, f.sha256) << f.name;
    EXPECT_EQ(d.size, f.size) << f.name;
    bytes += f.size;
  }
  EXPECT_EQ(bytes, out.bytes);
  // A complete Hugging Face folder: the version it is written for, and a model card that says the
  // byte-level vocabulary has no tokenizer.
  const auto gen = read_json_file(tmp.str("export/generation_config.json"));
  EXPECT_EQ(gen["transformers_version"], model::kTransformersVersion);
  EXPECT_FALSE(gen.contains("eos_token_id")) << "no end-of-text token in a byte vocabulary";
  const std::string card = fs::read_file(tmp.str("export/README.md"));
  EXPECT_EQ(card.rfind("---\nlibrary_name: transformers\npipeline_tag: text-generation\n", 0), 0u) << card;
  EXPECT_NE(card.find("There is no tokenizer: the vocabulary is the 256 byte values"), std::string::npos) << card;
  EXPECT_NE(card.find("2 layers, 4 heads, width 32, context 32"), std::string::npos) << card;

  // GPT-2's orientation and metadata, as transformers reads them.
  auto file = checkpoint::SafetensorsFile::open(tmp.str("export/model.safetensors"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.find("h.0.attn.c_attn.weight")->shape, (std::vector<std::int64_t>{32, 96}));
  EXPECT_EQ(file.find("h.1.mlp.c_fc.weight")->shape, (std::vector<std::int64_t>{32, 128}));
  EXPECT_EQ(file.find("wte.weight")->shape, (std::vector<std::int64_t>{256, 32}));
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);  // tied to wte
  const auto cfg = read_json_file(tmp.str("export/config.json"));
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_positions"], 32);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_TRUE(cfg["bos_token_id"].is_null());
  EXPECT_EQ(cfg["transformers_version"], model::kTransformersVersion);

  auto back = seeded(small(), 2);
  EXPECT_FALSE(torch::equal(back->named_parameters()["h.0.attn.c_attn.weight"],
                            src->named_parameters()["h.0.attn.c_attn.weight"]));
  model::load_gpt2_safetensors(back, tmp.str("export/model.safetensors"));
  for (const auto& p : src->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), back->named_parameters()[p.key()])) << p.key();
}

TEST(HfExport, GptTwosTokenizerGetsItsEndOfTextAndAModelWithoutBiasesZeroBiases) {
  anchor::testing::TempDir tmp("hf-export");
  auto g = seeded(small(50257, /*bias=*/false), 3);
  const auto out = export_to(g, tmp.str("export"));
  ASSERT_EQ(out.files.size(), 4u);
  EXPECT_EQ(out.files[2].name, "generation_config.json");
  EXPECT_NE(fs::read_file(tmp.str("export/README.md")).find("GPT-2's tokenizer's (50257"), std::string::npos)
      << "the card says which tokenizer the ids are, and that the folder lacks it";
  const auto gen = read_json_file(tmp.str("export/generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], 50256);
  EXPECT_EQ(read_json_file(tmp.str("export/config.json"))["bos_token_id"], 50256);
  auto file = checkpoint::SafetensorsFile::open(tmp.str("export/model.safetensors"));
  const auto* bias = file.find("h.1.attn.c_attn.bias");
  ASSERT_NE(bias, nullptr);  // GPT-2's Conv1D always has one: zero is the same function
  EXPECT_EQ(bias->shape, (std::vector<std::int64_t>{96}));
  auto b = torch::from_blob(const_cast<std::uint8_t*>(file.data(*bias)), {96}, torch::kFloat32);
  EXPECT_EQ(b.abs().sum().item().toFloat(), 0.0f);
  EXPECT_NE(file.find("h.1.ln_2.bias"), nullptr);  // LayerNorm keeps its own
}

TEST(HfExport, AnOldExportIsReplacedWholeOrKept) {
  anchor::testing::TempDir tmp("hf-export");
  auto first = seeded(small(), 4);
  const auto old = export_to(first, tmp.str("export"));
  auto second = seeded(small(), 5);
  // The second file's create fails: the old export stays, whole, and no temporary is left beside it.
  fs::FaultInjectingFs faulty;
  faulty.fail_on(fs::Op::kCreate, 2, ENOSPC);
  EXPECT_THROW(model::export_gpt2_hf(second->named_parameters(), second->options(), tmp.str("export"), {}, faulty),
               Error);
  for (const auto& f : old.files) EXPECT_EQ(sha256_file(tmp.str("export/" + f.name)).sha256, f.sha256) << f.name;
  std::vector<std::string> names;
  for (const auto& e : stdfs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"export"});
  // Then it succeeds: all new, nothing of the old left.
  const auto now = export_to(second, tmp.str("export"));
  EXPECT_NE(now.files[0].sha256, old.files[0].sha256);
  EXPECT_EQ(sha256_file(tmp.str("export/model.safetensors")).sha256, now.files[0].sha256);
  names.clear();
  for (const auto& e : stdfs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"export"});
}

TEST(HfExport, AParameterGptTwoHasNoNameForIsRefused) {
  anchor::testing::TempDir tmp("hf-export");
  auto g = seeded(small(), 6);
  auto params = g->named_parameters();
  params.insert("h.0.attn.rotary.weight", torch::zeros({2}));
  try {
    model::export_gpt2_hf(params, g->options(), tmp.str("export"));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.attn.rotary.weight has no GPT-2 name"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stdfs::exists(tmp.str("export")));
}

// tests/interop/hf_gpt2.py under the torch2 interpreter (transformers), its stderr with its stdout.
proc::RunResult hf_gpt2(std::vector<std::string> args) {
  args.insert(args.begin(), {anchor::testing::source_path("scripts/torch2-python"),
                             anchor::testing::source_path("tests/interop/hf_gpt2.py")});
  proc::SpawnOptions o;
  o.merge_stderr = true;
  return proc::run_capture(args, o);
}

// The logits transformers computes from the export.
torch::Tensor hf_logits(const std::string& dir, const std::vector<int>& ids, const std::string& out) {
  std::string csv;
  for (int i : ids) csv += (csv.empty() ? "" : ",") + std::to_string(i);
  auto r = hf_gpt2({dir, "--logits", csv, out});
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return {};
  auto file = checkpoint::SafetensorsFile::open(out);
  const auto* e = file.find("logits");
  return torch::from_blob(const_cast<std::uint8_t*>(file.data(*e)), e->shape, torch::kFloat32).clone();
}

TEST(HfExport, TransformersLoadsItWithTheSameLogits) {
  anchor::testing::TempDir tmp("hf-export");
  auto g = seeded(small(), 7);
  export_to(g, tmp.str("export"));
  const std::vector<int> ids = {3, 141, 59, 26, 53, 58, 97, 93, 238, 46, 2, 255, 0, 17, 17, 64};
  g->eval();
  torch::Tensor ours;
  {
    torch::NoGradGuard no_grad;
    ours = g->forward(torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end())).unsqueeze(0));
  }
  const auto theirs = hf_logits(tmp.str("export"), ids, tmp.str("logits.safetensors"));
  ASSERT_TRUE(theirs.defined());
  ASSERT_EQ(theirs.sizes(), ours.sizes());
  const double diff = (theirs - ours).abs().max().item<double>();
  EXPECT_LE(diff, 1e-4) << "max |logit difference|";

  // Negative control: one square weight in torch's [out, in] orientation
  // loads (the shape fits) and gives other logits, far outside the bound.
  auto file = checkpoint::SafetensorsFile::open(tmp.str("export/model.safetensors"));
  std::vector<torch::Tensor> keep;
  std::vector<checkpoint::TensorRef> refs;
  for (const auto& e : file.entries()) {
    auto t = torch::from_blob(const_cast<std::uint8_t*>(file.data(e)), e.shape, torch::kFloat32);
    refs.push_back(model::tensor_ref(e.name, e.name == "h.0.attn.c_proj.weight" ? t.t() : t, keep));
  }
  stdfs::create_directories(tmp.path() / "wrong");
  stdfs::copy_file(tmp.path() / "export/config.json", tmp.path() / "wrong/config.json");
  checkpoint::write_safetensors(fs::real_fs(), tmp.str("wrong/model.safetensors"), refs, {{"format", "pt"}});
  const auto wrong = hf_logits(tmp.str("wrong"), ids, tmp.str("wrong.safetensors"));
  ASSERT_TRUE(wrong.defined());
  EXPECT_GT((wrong - ours).abs().max().item<double>(), 100 * 1e-4);

  // A tensor transformers has no place for is named, not ignored.
  keep.clear();
  refs.clear();
  for (const auto& e : file.entries())
    refs.push_back(model::tensor_ref(
        e.name, torch::from_blob(const_cast<std::uint8_t*>(file.data(e)), e.shape, torch::kFloat32), keep));
  refs.push_back(model::tensor_ref("h.0.attn.rotary", torch::zeros({2}), keep));
  stdfs::remove(tmp.path() / "wrong/model.safetensors");
  checkpoint::write_safetensors(fs::real_fs(), tmp.str("wrong/model.safetensors"), refs, {{"format", "pt"}});
  auto r = hf_gpt2({tmp.str("wrong"), "--check-loss"});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("h.0.attn.rotary"), std::string::npos) << r.out;
}

// The version the files claim is the one the torch2 lock installs and the interop tests load them with.
TEST(HfExport, ClaimsTheTransformersVersionTheLockPins) {
  const std::string lock = fs::read_file(std::string(ANCHOR_SOURCE_DIR) + "/requirements/torch2.in");
  EXPECT_NE(lock.find(std::string("\ntransformers==") + model::kTransformersVersion + "\n"), std::string::npos)
      << "requirements/torch2.in pins another transformers than model::kTransformersVersion\n"
      << lock;
}

}  // namespace
