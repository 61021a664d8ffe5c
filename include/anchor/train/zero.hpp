#pragma once
// Sharded data parallelism (ZeRO-1 / ZeRO-2) over a dist::ProcessGroup
// (docs/distributed.md, "Sharded strategies").
//
// Partition: whole parameters, assigned to ranks by a deterministic balanced
// partition (largest first to the least-loaded rank; ties to the lower index /
// lower rank). Each rank owns the AdamW state of its parameters only. Whole
// parameters rather than a flat contiguous shard because the optimizer state is
// keyed by parameter name (checkpoints reshard by name: a shard file is a set
// of whole named tensors), and because every element then goes through exactly
// the arithmetic DDP applies to it: with 2 ranks ZeRO-1/2 equal DDP bitwise.
// The price is granularity: the largest parameter bounds the balance.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "anchor/train/adamw.hpp"

namespace anchor::dist {
class ProcessGroup;
}

namespace anchor::train {

enum class Strategy { kDdp, kZero1, kZero2 };
// "ddp" | "zero1" | "zero2"; anything else is a config error.
Strategy parse_strategy(const std::string& s);
const char* strategy_name(Strategy s);

// owner[i]: the rank that owns parameter i (numels in optimizer order).
std::vector<int> partition_parameters(const std::vector<std::int64_t>& numels, int world);

struct ZeroSyncStats {
  double seconds = 0;      // gradient reduce (+ norm all-reduce for ZeRO-2)
  std::int64_t bytes = 0;  // gradient bytes this rank sent into collectives
  int buckets = 0;
};

// Gradient synchronisation and clipping for a sharded step; returns the global
// gradient norm before clipping (bitwise the value DDP computes).
//   ZeRO-1: every gradient all-reduced and averaged (as DDP), clipped on every rank.
//   ZeRO-2: each owner's gradients reduced (summed) to that owner in buckets and
//           averaged there; the other ranks drop them (grad undefined). The
//           global norm: each owner computes its parameters' norms into a
//           vector (zeros elsewhere), the vector is all-reduced (x + 0 is
//           exact), and every rank takes its norm as DDP does.
double zero_sync_and_clip(dist::ProcessGroup& pg, const AdamW& opt, const std::vector<int>& owner, Strategy s,
                          std::int64_t bucket_bytes, std::int64_t step, double max_norm, ZeroSyncStats* st);

// The optimizer step on this rank's parameters only (the others' gradients are
// set aside during it and put back: ZeRO-1 keeps full gradients).
void zero_optimizer_step(AdamW& opt, const std::vector<int>& owner, int rank, double lr);

// Every parameter broadcast from its owner, in buckets per owner. Returns seconds.
double zero_broadcast_parameters(dist::ProcessGroup& pg, const AdamW& opt, const std::vector<int>& owner,
                                 std::int64_t bucket_bytes, std::int64_t step);

}  // namespace anchor::train
