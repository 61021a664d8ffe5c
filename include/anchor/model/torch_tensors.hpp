#pragma once
// torch tensors <-> the checkpoint's safetensors records: the one dtype map
// (both directions) and the by-name reference to a CPU copy. On the torch side
// (model, the lowest torch module): the checkpoint module itself has no torch.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/error.hpp"

namespace anchor::model {

inline checkpoint::DType dtype_of(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return checkpoint::DType::F32;
    case torch::kFloat16: return checkpoint::DType::F16;
    case torch::kBFloat16: return checkpoint::DType::BF16;
    case torch::kFloat64: return checkpoint::DType::F64;
    case torch::kInt64: return checkpoint::DType::I64;
    case torch::kInt32: return checkpoint::DType::I32;
    case torch::kUInt8: return checkpoint::DType::U8;
    case torch::kBool: return checkpoint::DType::BOOL;
    default: throw Error(ErrorKind::kRuntime, std::string("cannot checkpoint dtype ") + c10::toString(t));
  }
}

inline torch::ScalarType torch_dtype(checkpoint::DType d) {
  switch (d) {
    case checkpoint::DType::F32: return torch::kFloat32;
    case checkpoint::DType::F16: return torch::kFloat16;
    case checkpoint::DType::BF16: return torch::kBFloat16;
    case checkpoint::DType::F64: return torch::kFloat64;
    case checkpoint::DType::I64: return torch::kInt64;
    case checkpoint::DType::I32: return torch::kInt32;
    case checkpoint::DType::U8: return torch::kUInt8;
    case checkpoint::DType::BOOL: return torch::kBool;
    default: throw Error(ErrorKind::kVerification, std::string("unsupported dtype ") + checkpoint::dtype_name(d));
  }
}

// A contiguous CPU copy of `t`, kept alive in `keep`, referenced by name.
inline checkpoint::TensorRef tensor_ref(const std::string& name, const torch::Tensor& t,
                                        std::vector<torch::Tensor>& keep) {
  keep.push_back(t.detach().to(torch::kCPU).contiguous());
  const auto& c = keep.back();
  return checkpoint::TensorRef{name, dtype_of(c.scalar_type()), c.sizes().vec(), c.data_ptr(),
                               static_cast<std::size_t>(c.nbytes())};
}

}  // namespace anchor::model
