#include "anchor/model/hf_export.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/model/torch_tensors.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"

namespace anchor::model {
namespace {

constexpr int kGpt2Vocab = 50257;  // GPT-2's tokenizer; <|endoftext|> is its last token
constexpr int kEndOfText = 50256;

// GPT-2 keeps these as Conv1D: weight [in, out], where torch's Linear is [out, in].
bool is_conv1d(const std::string& n) {
  for (const char* c : {".attn.c_attn.", ".attn.c_proj.", ".mlp.c_fc.", ".mlp.c_proj."})
    if (n.find(c) != std::string::npos) return true;
  return false;
}

// Every export name must be one of GPT-2's: the exact set the model's options imply.
std::vector<std::string> gpt2_names(const GptOptions& o) {
  std::vector<std::string> out = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < o.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* n : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      out.push_back(h + n + ".weight");
      out.push_back(h + n + ".bias");
    }
  }
  out.push_back("ln_f.weight");
  out.push_back("ln_f.bias");
  return out;
}

void write_text(fs::FileSystem& fs, const std::string& path, const std::string& text) {
  fs::UniqueFd fd = fs.create_excl(path, 0644);
  fs.write_all(fd.get(), text.data(), text.size(), path);
  fs.fsync(fd.get(), path);
  fs.close(std::move(fd), path);
}

}  // namespace

nlohmann::json gpt2_config(const GptOptions& o) {
  nlohmann::json c = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", o.vocab_size},
      {"n_positions", o.block_size},
      {"n_embd", o.n_embd},
      {"n_layer", o.n_layer},
      {"n_head", o.n_head},
      {"n_inner", nullptr},                 // 4 n_embd, as the built-in MLP
      {"activation_function", "gelu_new"},  // GELU's tanh approximation
      {"resid_pdrop", o.dropout},
      {"embd_pdrop", o.dropout},
      {"attn_pdrop", o.dropout},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},  // 1/sqrt(head dim)
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},  // the LM head is wte
      {"use_cache", true},
      {"dtype", "float32"},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"transformers_version", kTransformersVersion},
  };
  if (o.vocab_size == kGpt2Vocab) c["bos_token_id"] = c["eos_token_id"] = kEndOfText;
  return c;
}

std::string model_card(const GptOptions& o, const ModelCard& card) {
  std::ostringstream md;
  md << "---\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- gpt2\n- anchor\n- pilot\n---\n\n"
     << "# A pilot's GPT-2" << (card.run_id.empty() ? "" : ": " + card.run_id) << "\n\n"
     << "The weights of anchor's built-in GPT after its pilot run, in Hugging Face's GPT-2 layout. A pilot trains a "
        "few steps to prove the run (resume, memory, throughput): this is not a trained language model.\n\n"
     << "| | |\n|---|---|\n"
     << "| architecture | GPT2LMHeadModel: " << o.n_layer << " layers, " << o.n_head << " heads, width " << o.n_embd
     << ", context " << o.block_size << " |\n"
     << "| vocabulary | " << o.vocab_size << " tokens |\n";
  if (card.step > 0) md << "| optimizer steps | " << card.step << " |\n";
  if (!card.run_id.empty()) md << "| run | " << card.run_id << " (its signed report.json lists every file here) |\n";
  if (!card.anchor_version.empty()) md << "| written by | anchor " << card.anchor_version << " |\n";
  md << "| transformers | " << kTransformersVersion << " (the release this export is tested against) |\n\n"
     << "## Vocabulary\n\n";
  if (o.vocab_size == 256 && card.data_format != "llmc")
    md << "There is no tokenizer: the vocabulary is the 256 byte values, and token i is the byte i. This folder has "
          "no tokenizer.json, vocab.json or merges.txt, and `AutoTokenizer` cannot load one from it. Encode text as "
          "its UTF-8 bytes and decode the same way:\n\n```python\nids = list(text.encode(\"utf-8\"))\n"
          "text = bytes(ids).decode(\"utf-8\", errors=\"replace\")\n```\n\n";
  else if (o.vocab_size == kGpt2Vocab)
    md << "The ids are GPT-2's tokenizer's (50257, `<|endoftext|>` = 50256), which this folder does not hold: load "
          "it from its own source (`AutoTokenizer.from_pretrained(\"gpt2\")`).\n\n";
  else
    md << "The ids are those of the token shards it trained on (data.format llmc). The tokenizer that made them is "
          "not part of the run, and this folder holds none: use the one that made the shards.\n\n";
  md << "## Loading and checking\n\n```python\nfrom transformers import GPT2LMHeadModel\n"
        "model = GPT2LMHeadModel.from_pretrained(\"path/to/this/folder\")\n```\n\n"
        "`anchor verify` checks every file against the run's signed report, and `model.sig` (beside this folder) "
        "signs it in the OpenSSF Model Signing format. The export stage's `check_loss` in report.json is the loss "
        "on a fixed sequence: computing it again from these files confirms they are the weights anchor trained "
        "(docs/models.md, \"Export\").\n";
  return md.str();
}

HfExport export_gpt2_hf(const torch::OrderedDict<std::string, torch::Tensor>& params, const GptOptions& o,
                        const std::string& dir, const ModelCard& card, fs::FileSystem& fs) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& p : params) by_name[p.key()] = p.value();
  auto ends_with = [](const std::string& s, const char* tail) {
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  std::vector<torch::Tensor> keep;
  std::vector<checkpoint::TensorRef> tensors;
  std::size_t taken = 0;
  const auto names = gpt2_names(o);
  for (const auto& name : names) {
    auto it = by_name.find(name);
    torch::Tensor t;
    if (it != by_name.end()) {
      t = it->second.detach().to(torch::kCPU, torch::kFloat32);
      if (is_conv1d(name) && t.dim() == 2) t = t.t();
      ++taken;
    } else if (!o.bias && is_conv1d(name) && ends_with(name, ".bias") &&
               by_name.count(name.substr(0, name.size() - 5) + ".weight")) {
      // torch's Linear weight is [out, in]: the bias GPT-2 needs is [out], zero.
      t = torch::zeros({by_name.at(name.substr(0, name.size() - 5) + ".weight").size(0)}, torch::kFloat32);
    } else {
      throw Error(ErrorKind::kRuntime,
                  "export: the model has no parameter " + name + " (only the built-in GPT exports in GPT-2's layout)");
    }
    tensors.push_back(model::tensor_ref(name, t, keep));
  }
  if (taken != by_name.size()) {
    for (const auto& [name, t] : by_name)
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw Error(ErrorKind::kRuntime, "export: parameter " + name + " has no GPT-2 name");
  }

  const std::filesystem::path target(dir);
  const std::string parent = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = parent + "/." + target.filename().string() + ".tmp-" + fs::random_suffix();
  HfExport out;
  try {
    fs.mkdir(tmp, 0755);
    auto record = [&](const std::string& name, const FileDigest& d) {
      out.files.push_back({name, d.size, d.sha256});
      out.bytes += d.size;
    };
    record("model.safetensors",
           checkpoint::write_safetensors(fs, tmp + "/model.safetensors", tensors, {{"format", "pt"}}));
    keep.clear();
    auto json_file = [&](const std::string& name, const nlohmann::json& j) {
      const std::string text = j.dump(2) + "\n";
      write_text(fs, tmp + "/" + name, text);
      record(name, FileDigest{sha256_hex(text), text.size()});
    };
    json_file("config.json", gpt2_config(o));
    nlohmann::json generation = {{"_from_model_config", true}, {"transformers_version", kTransformersVersion}};
    if (o.vocab_size == kGpt2Vocab) generation.update({{"bos_token_id", kEndOfText}, {"eos_token_id", kEndOfText}});
    json_file("generation_config.json", generation);
    const std::string readme = model_card(o, card);
    write_text(fs, tmp + "/README.md", readme);
    record("README.md", FileDigest{sha256_hex(readme), readme.size()});
    fs.fsync_dir(tmp);
    std::error_code ec;
    if (std::filesystem::symlink_status(target, ec).type() == std::filesystem::file_type::directory) {
      fs.exchange(tmp, dir);  // the old export now at tmp, removed below
    } else {
      if (std::filesystem::exists(std::filesystem::symlink_status(target, ec)))
        throw Error(ErrorKind::kIo, "export: " + dir + " exists and is not a directory",
                    "remove it, or choose another run directory");
      fs.rename(tmp, dir);
    }
    fs.fsync_dir(parent);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  fs.remove_all(tmp);
  return out;
}

}  // namespace anchor::model
