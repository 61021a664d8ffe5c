#pragma once
// A user's model as a TorchScript module (model.source: torchscript). The
// contract (docs/models.md): saved from Python with torch.jit.script(...).save,
// `forward(inputs, targets)` takes int64 [B, T] token ids and the next tokens
// and returns the mean loss as a 0-dim floating tensor; at least one
// parameter requires grad. Dropout inside draws from the default CPU (or
// CUDA) generator, which the trainer checkpoints and restores.
// The jit headers stay in torchscript.cpp: this header has no torch/script.h.
#include <memory>
#include <string>

#include "anchor/model/model.hpp"

namespace anchor::model {

// Loads `path` and checks the contract: forward's signature, that a call on a
// [1, probe_seq_len] batch of zeros (eval mode, no grad, RNG state left as it
// was) returns a 0-dim floating tensor, and that some parameter is trainable.
// Throws Error (kConfig) naming the file, what is wrong and what to do.
// probe_seq_len 0 skips the probe call.
std::unique_ptr<Model> load_torchscript(const std::string& path, int probe_seq_len);

}  // namespace anchor::model
