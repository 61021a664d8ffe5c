#pragma once
// The built-in GPT's weights in Hugging Face's GPT-2 layout (docs/models.md,
// "Export"): a directory that transformers.GPT2LMHeadModel.from_pretrained
// loads, and that anchor reads back as model.weights.
//   model.safetensors        GPT-2's names (wte, wpe, h.N.*, ln_f), its Conv1D
//                            [in, out] orientation, metadata {"format": "pt"};
//                            a model without biases (model.bias: false) gets
//                            zero biases, the same function.
//   config.json              a GPT2Config (architectures GPT2LMHeadModel) with the
//                            transformers_version the export is tested against.
//   generation_config.json   the same version; with GPT-2's tokenizer
//                            (vocab_size 50257) its <|endoftext|> as bos and eos.
//   README.md                the model card: metadata (YAML front matter), what
//                            trained it, and what its vocabulary is: with 256
//                            tokens, bytes and no tokenizer; otherwise ids whose
//                            tokenizer the export does not hold.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/model/gpt.hpp"

namespace anchor::model {

struct ExportedFile {
  std::string name;  // relative to the export directory
  std::uint64_t size = 0;
  std::string sha256;
};

struct HfExport {
  std::vector<ExportedFile> files;  // in the order written
  std::uint64_t bytes = 0;
};

// The transformers release the export's files are written for and tested against
// (requirements/torch2.in pins the same; a unit test holds them together).
inline constexpr const char* kTransformersVersion = "5.24.0";

// GPT2Config's fields for these options.
nlohmann::json gpt2_config(const GptOptions& o);

// What the model card says of the run that trained the weights; empty fields are left out.
struct ModelCard {
  std::string run_id;
  std::int64_t step = 0;    // optimizer steps the weights have taken
  std::string data_format;  // data.format: "text" (bytes) or "llmc" (token ids)
  std::string anchor_version;
};

// README.md for these options and that run: YAML front matter (library_name, pipeline_tag, tags),
// then the model, the run, the vocabulary and how to load and check it.
std::string model_card(const GptOptions& o, const ModelCard& card);

// Writes the export of `params` (the built-in GPT's named_parameters, on any
// device) to `dir`: every file into a sibling temporary directory, fsynced,
// which then replaces `dir` (renamed into place, the parent fsynced), so `dir`
// is either the old export or the whole new one. Throws Error (kRuntime) for a
// parameter that is not the built-in GPT's, (kIo) naming the path when the
// file system fails (the temporary directory removed).
HfExport export_gpt2_hf(const torch::OrderedDict<std::string, torch::Tensor>& params, const GptOptions& o,
                        const std::string& dir, const ModelCard& card = {}, fs::FileSystem& fs = fs::real_fs());

}  // namespace anchor::model
