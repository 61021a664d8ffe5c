// ZeRO-1 / ZeRO-2 over the process group (docs/distributed.md, "Sharded strategies").
#include "anchor/train/zero.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "anchor/dist/process_group.hpp"
#include "anchor/error.hpp"

namespace anchor::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Indices of the parameters owned by `r`, in parameter order, split into
// buckets of at most bucket_bytes (a larger tensor is a bucket of its own; a
// bucket never mixes dtypes or devices).
std::vector<std::vector<std::size_t>> owner_buckets(const std::vector<torch::Tensor>& ts, const std::vector<int>& owner,
                                                    int r, std::int64_t bucket_bytes) {
  std::vector<std::vector<std::size_t>> out;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (owner[i] != r) continue;
    const auto n = static_cast<std::int64_t>(ts[i].nbytes());
    if (out.empty() || bytes + n > bucket_bytes || ts[out.back().front()].scalar_type() != ts[i].scalar_type() ||
        ts[out.back().front()].device() != ts[i].device()) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(i);
    bytes += n;
  }
  return out;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& ts, const std::vector<std::size_t>& idx) {
  std::vector<torch::Tensor> flat;
  flat.reserve(idx.size());
  for (auto i : idx) flat.push_back(ts[i].reshape({-1}));
  return torch::cat(flat);
}

void unflatten(const torch::Tensor& bucket, std::vector<torch::Tensor>& ts, const std::vector<std::size_t>& idx) {
  std::int64_t off = 0;
  for (auto i : idx) {
    const auto n = ts[i].numel();
    ts[i].copy_(bucket.narrow(0, off, n).view_as(ts[i]));
    off += n;
  }
}

}  // namespace

Strategy parse_strategy(const std::string& s) {
  if (s == "ddp") return Strategy::kDdp;
  if (s == "zero1") return Strategy::kZero1;
  if (s == "zero2") return Strategy::kZero2;
  throw Error(ErrorKind::kConfig, "distributed.strategy: unknown '" + s + "'", "use ddp, zero1 or zero2");
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kZero1: return "zero1";
    case Strategy::kZero2: return "zero2";
    default: return "ddp";
  }
}

std::vector<int> partition_parameters(const std::vector<std::int64_t>& numels, int world) {
  std::vector<int> owner(numels.size(), 0);
  if (world <= 1) return owner;
  std::vector<std::size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes in parameter order: deterministic on every rank.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return numels[a] > numels[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(world), 0);
  for (auto i : order) {
    const auto r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());  // lowest rank on ties
    owner[i] = r;
    load[static_cast<std::size_t>(r)] += numels[i];
  }
  return owner;
}

double zero_sync_and_clip(dist::ProcessGroup& pg, const AdamW& opt, const std::vector<int>& owner, Strategy s,
                          std::int64_t bucket_bytes, std::int64_t step, double max_norm, ZeroSyncStats* st) {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  std::vector<torch::Tensor> params;
  for (const auto& p : opt.params()) params.push_back(p.param);
  if (s != Strategy::kZero2) {
    auto g = dist::allreduce_gradients(pg, params, bucket_bytes, step);
    if (st) {
      st->seconds = g.seconds;
      st->bytes = g.bytes;
      st->buckets = g.buckets;
    }
    return clip_grad_norm(opt.params(), max_norm);
  }
  // ZeRO-2: reduce each owner's buckets to it ("reduce-scatter" with uneven
  // shards: Gloo in LibTorch 1.13 has no reduce_scatter; one reduce per bucket).
  std::vector<torch::Tensor> grads;
  for (auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  const int me = pg.rank();
  const double inv = 1.0 / pg.size();
  int nb = 0;
  std::int64_t bytes = 0;
  for (int r = 0; r < pg.size(); ++r) {
    for (const auto& idx : owner_buckets(grads, owner, r, bucket_bytes)) {
      auto bucket = flatten(grads, idx);
      pg.reduce_sum(bucket, r,
                    "gradient reduce to rank " + std::to_string(r) + " (bucket " + std::to_string(nb) + ", step " +
                        std::to_string(step) + ")");
      if (r == me) {
        bucket.mul_(inv);
        unflatten(bucket, grads, idx);
      }
      bytes += static_cast<std::int64_t>(bucket.nbytes());
      ++nb;
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    if (owner[i] != me) params[i].mutable_grad() = torch::Tensor();  // not ours: freed
  // The global norm: the vector DDP stacks, each entry from its owner.
  auto norms = torch::zeros({static_cast<std::int64_t>(params.size())}, grads.front().options());
  for (std::size_t i = 0; i < params.size(); ++i)
    if (owner[i] == me) norms.narrow(0, static_cast<std::int64_t>(i), 1).copy_(grads[i].norm(2).reshape({1}));
  pg.allreduce_sum(norms, "gradient norm all-reduce (step " + std::to_string(step) + ")");
  const double total = params.empty() ? 0.0 : norms.norm(2).item<double>();
  if (max_norm > 0) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0)
      for (auto& p : params)
        if (p.grad().defined()) p.grad().mul_(coef);
  }
  if (st) {
    st->seconds = since(t0);
    st->bytes = bytes;
    st->buckets = nb;
  }
  return total;
}

void zero_optimizer_step(AdamW& opt, const std::vector<int>& owner, int rank, double lr) {
  std::vector<torch::Tensor> aside(opt.params().size());
  auto& ps = const_cast<std::vector<NamedParam>&>(opt.params());
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (owner[i] != rank && ps[i].param.grad().defined()) {
      aside[i] = ps[i].param.grad();
      ps[i].param.mutable_grad() = torch::Tensor();
    }
  opt.step(lr);
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (aside[i].defined()) ps[i].param.mutable_grad() = aside[i];
}

double zero_broadcast_parameters(dist::ProcessGroup& pg, const AdamW& opt, const std::vector<int>& owner,
                                 std::int64_t bucket_bytes, std::int64_t step) {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  std::vector<torch::Tensor> params;
  for (const auto& p : opt.params()) params.push_back(p.param);
  int nb = 0;
  for (int r = 0; r < pg.size(); ++r)
    for (const auto& idx : owner_buckets(params, owner, r, bucket_bytes)) {
      auto bucket = flatten(params, idx);
      pg.broadcast(bucket, r,
                   "parameter broadcast from rank " + std::to_string(r) + " (bucket " + std::to_string(nb++) +
                       ", step " + std::to_string(step) + ")");
      if (r != pg.rank()) unflatten(bucket, params, idx);
    }
  return since(t0);
}

}  // namespace anchor::train
