#pragma once
// A c10d process group (TCPStore + ProcessGroupGloo) behind a small interface,
// and DDP's gradient averaging on top of it. Every rendezvous, store call and
// collective has a timeout; a failure is an anchor::Error that names the rank
// that did not answer (docs/distributed.md). c10d's headers stay in
// src/dist/process_group.cpp.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anchor/dist/allreduce.hpp"
#include "anchor/dist/launch.hpp"

namespace anchor::dist {

class ProcessGroup {
 public:
  // Rendezvous: the TCPStore (hosted by rank 0, or the torchrun agent's under
  // its prefix) and the Gloo group, both bounded by timeout_s.
  // `backend` is "gloo" or "nccl" (choose_backend in launch.hpp); nccl needs
  // a build with NCCL (nccl_available()) and tensors on this rank's GPU.
  ProcessGroup(const LaunchEnv& env, double timeout_s, const std::string& backend = "gloo");
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  double timeout_s() const;
  const std::string& backend() const;

  // In-place sum over ranks of one contiguous tensor. `what` names the call in errors.
  void allreduce_sum(torch::Tensor& t, const std::string& what);
  // In-place sum over ranks into `root`'s tensor (the others' are left unspecified).
  void reduce_sum(torch::Tensor& t, int root, const std::string& what);
  // `root`'s tensor copied into every rank's (same shape and dtype everywhere).
  void broadcast(torch::Tensor& t, int root, const std::string& what);
  void barrier(const std::string& what);
  // Every rank's string (rank order), through the store under `key` (unique per call).
  std::vector<std::string> exchange(const std::string& key, const std::string& mine);

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& cause);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build has ProcessGroupNCCL (RCCL in a ROCm LibTorch): set by
// CMake (ANCHOR_NCCL) when the LibTorch found links it.
bool nccl_available();

struct GradSyncStats {
  double seconds = 0;  // wall time of the all-reduce (flatten, reduce, unflatten)
  int buckets = 0;
  std::int64_t bytes = 0;  // gradient bytes reduced by this rank
};

// DDP: every gradient averaged over the ranks, in buckets of at most
// bucket_bytes (a tensor larger than a bucket is a bucket of its own). Bucket
// order and contents are the parameter order: identical on every rank.
GradSyncStats allreduce_gradients(ProcessGroup& pg, const std::vector<torch::Tensor>& grads, std::int64_t bucket_bytes,
                                  std::int64_t step);

// Times an in-place sum of fp32 tensors of each size in `sizes` (bytes) on
// `device` ("cpu", or this rank's "cuda:<n>" for NCCL): `warmup` untimed
// calls, then `iters` timed ones, each after a barrier so that every rank
// starts together; on a GPU each call is timed to its completion
// (synchronize). Every rank must call it with the same arguments.
std::vector<AllReduceTiming> time_allreduce(ProcessGroup& pg, const std::vector<std::int64_t>& sizes,
                                            const std::string& device, int warmup, int iters);

// Exchanges `digest` (this rank's parameter digest after `step`) and throws
// Error (kVerification) naming the ranks whose digest differs from rank 0's.
// `point` keeps two checks after the same step apart in the store ("step", "save").
void check_replicated(ProcessGroup& pg, const std::string& digest, std::int64_t step, const char* point);

}  // namespace anchor::dist
