#pragma once
// Training state and the step: model, AdamW, data, RNG, step counter. The pilot
// workers drive it; the checkpoint adapter (save_request/restore) maps it to
// name-keyed safetensors files and back.
#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "anchor/checkpoint/store.hpp"
#include "anchor/config/config.hpp"
#include "anchor/data/dataset.hpp"
#include "anchor/model/model.hpp"
#include "anchor/train/adamw.hpp"
#include "anchor/train/loss_scaler.hpp"
#include "anchor/train/precision.hpp"
#include "anchor/train/records.hpp"
#include "anchor/train/zero.hpp"

namespace anchor::dist {
class ProcessGroup;
}

namespace anchor::train {

// Which parts of a checkpoint a restore deliberately leaves out: the pilot's
// negative controls (ANCHOR_PILOT_FAULT) prove the comparison catches each.
struct RestoreFaults {
  bool drop_rng = false;
  bool drop_optimizer = false;
  bool wrong_step = false;
  bool drop_scaler = false;  // the loss scaler restarts at its initial state
  // Not a restore fault: with several ranks, rank 1 of worker A nudges one
  // parameter right before its first save, so the replica check there fails.
  bool diverge_replica = false;
  // Not a restore fault either: the profiler refuses to start for worker B's
  // last step, which then runs unprofiled (worker/worker.cpp, profiled_step).
  bool profiler_refuses = false;
  // ANCHOR_PILOT_FAULT=<point>[,...]; the points: src/common/faults.cpp.
  static RestoreFaults from_env();
  bool any() const { return drop_rng || drop_optimizer || wrong_step || drop_scaler; }
};

class Trainer {
 public:
  // Builds the model from the config (seeded init), the data, the optimizer.
  // Sets the thread count and deterministic mode. rank/world shard the data.
  // `device` overrides cfg.device (a rank's own GPU, dist::rank_device); the
  // config, and so every digest of it, stays as written.
  Trainer(const config::Config& cfg, int rank = 0, int world_size = 1, const std::string& device = "");

  // Data parallelism (DDP): from now on every step averages the gradients over
  // the group's ranks in buckets of bucket_bytes between backward and clipping,
  // reports the loss averaged over ranks, and (check_replicas) checks after the
  // step that every rank holds the same parameters. `pg` must outlive the trainer.
  // distributed.strategy zero1|zero2 shards the optimizer state (and, zero2,
  // the gradients) over the ranks instead (train/zero.hpp, docs/distributed.md).
  void attach(dist::ProcessGroup* pg, std::int64_t bucket_bytes, bool check_replicas = true);

  // One optimizer step (grad_accum micro-steps) at the current step; advances it.
  StepRecord train_step();
  // The memory probe's steps at other shapes (worker/worker.cpp): from now
  // on a step takes micro_batch windows of seq_len tokens, seq_len at most the
  // configured one (each window's first seq_len + 1 tokens). Not for a run
  // whose steps are compared: the batches are no longer the configured ones.
  void set_step_shape(int micro_batch, int seq_len);
  // The optimizer state a first step would create (AdamW::create_state), for
  // the memory probe: every later step then measures as a second step does.
  // One rank only (a sharded optimizer's state depends on its group).
  void create_optimizer_state();
  // SHA-256 over every parameter (names, dtypes, shapes, bytes): the replica check.
  std::string parameter_digest() const;
  // Mean validation loss over `batches` fixed batches (dropout off, RNG untouched),
  // in train.precision.
  double evaluate(int batches);

  // The pilot's numerical validation (docs/precision.md): the current step's
  // forward and backward (all micro-steps) in fp32 and in train.precision from
  // the same state, the RNG replayed so dropout masks match, compared by
  // compare_precision. Leaves parameters, optimizer, scaler, RNG and step as
  // they were (gradients cleared). Does not throw on non-finite values: the
  // verdict says "non_finite" and names the tensors.
  nlohmann::json validate_precision(double tolerance);
  Precision precision() const { return precision_; }
  const LossScaler& loss_scaler() const { return scaler_; }

  std::int64_t step() const { return step_; }
  // The model behind the interface: the built-in GPT or a TorchScript module.
  model::Model& model() { return *model_; }
  const data::Dataset& dataset() const { return *data_; }
  double flops_per_token() const;
  std::int64_t num_parameters() const { return model_->num_parameters(); }
  // "cpu" or "cuda:N": where the model and batches live.
  std::string device() const { return device_.str(); }
  // Bytes of parameters, gradients (as they stand now) and optimizer state.
  StateBytes state_bytes() const;
  // This rank's share of the state under the strategy, next to what DDP (every
  // rank holding everything) would hold: {"strategy", "rank", "world_size",
  // "owned_parameters", "owned_elements", "total_elements", "optimizer_bytes",
  // "optimizer_bytes_ddp", "gradient_bytes", "gradient_bytes_ddp"}. Gradient
  // bytes as they stand (after a step: what the step kept).
  nlohmann::json sharding() const;
  Strategy strategy() const { return strategy_; }

  // The checkpoint of the current state. The request points into tensors held
  // by `keepalive`, which must outlive the save.
  // With several ranks: only the files THIS rank writes, joined into one save
  // by train::save_distributed (docs/checkpoints.md, "Files written by every
  // rank"): rank 0 the model and the scaler, every rank its RNG file
  // (rng-rankRRRRR-of-WWWWW.safetensors), and the optimizer state —
  // optimizer.safetensors from rank 0 under DDP,
  // optimizer-rankRRRRR-of-WWWWW.safetensors (the parameters it owns) from
  // every rank under zero1/zero2.
  checkpoint::SaveRequest save_request(std::vector<torch::Tensor>& keepalive, const nlohmann::json& extra_state) const;
  // The RNG file this rank restores from: rng.safetensors on one rank.
  std::string rng_file_name() const;
  // Restores model, optimizer, RNG and step from a loaded checkpoint, saved at
  // any world size and strategy: optimizer state is looked up by name in
  // optimizer.safetensors or the optimizer-rank* shards (this rank takes what
  // it owns). When the world size differs, rank r < saved world carries over
  // saved rank r's RNG stream and the others are re-derived
  // (rng_restore()). Throws
  // Error (kVerification) naming any tensor missing or of the wrong shape/dtype.
  //
  // Returns the SHA-256s of the data of the tensors it copied byte for byte
  // from files the checkpoint pins per tensor (ckpt.digests): digest() reuses
  // them instead of hashing the restored state again (empty for a v1 checkpoint).
  KnownDigests restore(const checkpoint::Store::Loaded& ckpt, const RestoreFaults& faults = {});

  // SHA-256 digests of the whole training state, per group and per tensor
  // (train/records.hpp); "model" covers the parameters, then the buffers, by
  // name. A tensor's digest covers its dtype, shape and the SHA-256 of its
  // data, which `known` may hold already (keyed as StateDigest::tensors):
  // only valid while those tensors hold exactly the bytes that were hashed,
  // i.e. right after the save or restore that hashed them.
  StateDigest digest(const KnownDigests& known = {}) const;
  // What a save of this trainer hashed (SaveResult::digests), keyed for
  // digest(): its model and optimizer files' tensors.
  KnownDigests known_digests(const std::map<std::string, checkpoint::TensorDigests>& files) const;
  // digest() as JSON: {"model", "optimizer", "rng", "scaler", "loss_scale", "step", "tensors": {name: hex}}.
  nlohmann::json state_digest() const { return digest().to_json(); }
  // How the last restore set the RNG: {"saved_world_size", "world_size",
  // "carried": [ranks], "rederived": [{"rank", "seed", "from"}], "dropped": [ranks]}.
  const nlohmann::json& rng_restore() const { return rng_restore_; }

 private:
  void make_batch(std::int64_t step, int micro, torch::Tensor& x, torch::Tensor& y, class Sha256& digest);
  // The micro-steps of the current step: forward in `p` (autocast), backward
  // of loss * scale, gradients accumulated. Returns the (unscaled) mean loss.
  double forward_backward(Precision p, double scale, StepRecord& r, class Sha256& digest);

  config::Config cfg_;
  torch::Device device_{torch::kCPU};
  int rank_, world_;
  std::int64_t total_steps_;
  std::unique_ptr<data::Dataset> data_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<AdamW> opt_;
  Precision precision_ = Precision::kFp32;
  LossScaler scaler_;
  // Test seam ANCHOR_GRAD_FAULT=inf:<step>|nan:<step>[,...]: that step's first
  // gradient gets an inf/NaN after backward (docs/precision.md).
  std::vector<std::pair<std::int64_t, double>> grad_faults_;
  std::int64_t step_ = 0;
  std::vector<std::uint16_t> window_buf_;
  dist::ProcessGroup* pg_ = nullptr;
  std::int64_t bucket_bytes_ = 25 << 20;
  bool check_replicas_ = true;
  Strategy strategy_ = Strategy::kDdp;
  std::vector<int> owner_;  // zero1/zero2: owner rank of each optimizer parameter
  nlohmann::json rng_restore_ = nlohmann::json::object();
  // Test seam ANCHOR_DIST_FAULT=sigkill:<rank>:<step>: that rank SIGKILLs itself
  // in that step after backward, before the all-reduce (docs/distributed.md).
  int fault_rank_ = -1;
  std::int64_t fault_step_ = -1;
};

// The CPU generator's state (a uint8 tensor) and back.
torch::Tensor get_cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);
#if defined(ANCHOR_WITH_CUDA)
// The default CUDA generator of device `index` (16 bytes from LibTorch 2.1, 816 before).
torch::Tensor get_cuda_rng_state(int index);
void set_cuda_rng_state(int index, const torch::Tensor& state);
#endif

}  // namespace anchor::train
