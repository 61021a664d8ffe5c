#include "anchor/train/trainer.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#if defined(ANCHOR_WITH_CUDA)
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "anchor/model/torch_tensors.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/threads.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/common/faults.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/train/state_format.hpp"
#include "anchor/train/schedule.hpp"
#include "compat/torch_compat.hpp"

namespace anchor::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using model::tensor_ref;

// A tensor's digest (train::kStateDigestScheme): SHA-256 over its dtype, rank
// and shape and the SHA-256 of its data bytes. `data_hex`, when given, is that
// data SHA-256 as a save or a verified restore computed it (the checkpoint
// manifest's per-tensor digest): the data is then not hashed again.
std::string tensor_digest(const torch::Tensor& t, const std::string* data_hex = nullptr) {
  Sha256 h;
  h.update(std::string(c10::toString(t.scalar_type())) + ":" + std::to_string(t.dim()) + ":");
  for (auto s : t.sizes()) h.update(&s, sizeof s);
  if (data_hex) {
    h.update(*data_hex);
  } else {
    const auto c = t.detach().to(torch::kCPU).contiguous();
    h.update(sha256_hex(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes())));
  }
  return h.hex();
}

const std::string* find_known(const KnownDigests& known, const std::string& key) {
  const auto it = known.find(key);
  return it == known.end() ? nullptr : &it->second;
}

torch::Tensor view_of(const checkpoint::SafetensorsFile& f, const std::string& file, const std::string& name) {
  const auto* e = f.find(name);
  if (!e)
    throw Error(ErrorKind::kVerification, "checkpoint " + file + " has no tensor '" + name + "'",
                "the checkpoint was written by a different model or anchor version");
  return torch::from_blob(const_cast<std::uint8_t*>(f.data(*e)), e->shape,
                          torch::TensorOptions().dtype(model::torch_dtype(e->dtype)));
}

void copy_into(torch::Tensor& dst, const torch::Tensor& src, const std::string& what) {
  if (dst.sizes() != src.sizes() || dst.scalar_type() != src.scalar_type()) {
    std::ostringstream os;
    os << what << ": checkpoint has " << c10::toString(src.scalar_type()) << src.sizes() << ", the model expects "
       << c10::toString(dst.scalar_type()) << dst.sizes();
    throw Error(ErrorKind::kVerification, os.str(), "restore with the config the checkpoint was saved with");
  }
  dst.copy_(src);
}

const checkpoint::SafetensorsFile& file_of(const checkpoint::Store::Loaded& c, const std::string& name) {
  auto it = c.files.find(name);
  if (it == c.files.end()) throw Error(ErrorKind::kVerification, "checkpoint " + c.dir + " has no " + name);
  return it->second;
}

// Test seam ANCHOR_GRAD_FAULT: in `step`, the first parameter's gradient gets
// the fault's inf/NaN.
void inject_grad_faults(const std::vector<std::pair<std::int64_t, double>>& faults, std::int64_t step,
                        const std::vector<NamedParam>& params) {
  for (const auto& [fault_step, value] : faults)
    if (fault_step == step && !params.empty()) {
      torch::NoGradGuard no_grad;
      const auto& p = params.front();
      ANCHOR_LOG_WARN("train", "ANCHOR_GRAD_FAULT: step {}: {} put into the gradient of {}", step, value, p.name);
      if (p.param.grad().defined()) p.param.grad().view(-1)[0].fill_(value);
    }
}

// Test seam ANCHOR_DIST_FAULT=sigkill:<rank>:<step>.
void kill_before_allreduce(int rank, std::int64_t step) {
  ANCHOR_LOG_WARN("dist", "ANCHOR_DIST_FAULT: rank {} kills itself in step {} before the all-reduce", rank, step);
  std::fflush(nullptr);
  ::raise(SIGKILL);
}

void unscale_gradients(const std::vector<NamedParam>& params, double loss_scale) {
  torch::NoGradGuard no_grad;  // unscaled before the sync clips them
  for (const auto& p : params)
    if (p.param.grad().defined()) p.param.grad().mul_(1.0 / loss_scale);
}

// Unscaled before clipping (ZeRO: before the sync, which clips), then the
// step is skipped (and the scale backs off) on any inf/NaN. Returns whether
// the step applies.
bool unscale_and_update_scaler(LossScaler& scaler, const std::vector<NamedParam>& params, bool sharded,
                               std::int64_t step, StepRecord& r) {
  torch::NoGradGuard no_grad;
  NamedTensors grads;
  for (const auto& p : params) {
    if (!sharded && p.param.grad().defined() && r.loss_scale != 1.0) p.param.grad().mul_(1.0 / r.loss_scale);
    grads.push_back({p.name, p.param.grad()});
  }
  const auto bad = non_finite_names(grads);
  // ZeRO: the global norm says whether any rank's gradient is non-finite, so every rank decides alike.
  const bool apply = scaler.update(sharded ? !std::isfinite(r.grad_norm) : !bad.empty());
  if (!apply) {
    r.skipped = true;
    r.grad_norm = 0;
    r.nonfinite_grad = bad.empty() ? std::string("(a gradient another rank reduced)") : bad.front();
    ANCHOR_LOG_WARN("train", "step {}: inf/NaN gradient in {}; step skipped, loss scale {} -> {}", step,
                    r.nonfinite_grad, r.loss_scale, scaler.scale());
  }
  return apply;
}

// Clips (ZeRO: the sync did), names a non-finite gradient, and steps the
// optimizer (ZeRO: the parameters this rank owns) at r.lr.
void apply_update(AdamW& opt, const std::vector<int>& owner, int rank, bool sharded, double grad_clip, StepRecord& r) {
  if (!sharded) r.grad_norm = clip_grad_norm(opt.params(), grad_clip);
  if (!std::isfinite(r.grad_norm)) {
    // No scaler to skip it: name the gradient for the caller (clipping keeps inf/NaN non-finite).
    NamedTensors grads;
    for (const auto& p : opt.params()) grads.push_back({p.name, p.param.grad()});
    const auto bad = non_finite_names(grads);
    if (!bad.empty()) r.nonfinite_grad = bad.front();
  }
  if (sharded)
    zero_optimizer_step(opt, owner, rank, r.lr);
  else
    opt.step(r.lr);
}

// AdamW's three tensors of one parameter, into `file`.
void add_adamw(checkpoint::FileContent& file, const std::string& param, const AdamW::State& s,
               std::vector<torch::Tensor>& keep) {
  file.tensors.push_back(tensor_ref(adamw_tensor(param, AdamWTensor::kExpAvg), s.exp_avg, keep));
  file.tensors.push_back(tensor_ref(adamw_tensor(param, AdamWTensor::kExpAvgSq), s.exp_avg_sq, keep));
  file.tensors.push_back(
      tensor_ref(adamw_tensor(param, AdamWTensor::kStep), torch::tensor(s.step, torch::kInt64), keep));
}

// rng.safetensors of a one-rank save.
checkpoint::FileContent one_rng_file_content([[maybe_unused]] const torch::Device& device,
                                             std::vector<torch::Tensor>& keep) {
  checkpoint::FileContent one_rng_file{rng_file(0, 1), {}, {{"format", kRngFileFormat}}};
  one_rng_file.tensors.push_back(tensor_ref(kCpuGenerator, get_cpu_rng_state(), keep));
#if defined(ANCHOR_WITH_CUDA)
  // Dropout on the GPU draws from the device generator: its state travels too.
  if (device.is_cuda())
    one_rng_file.tensors.push_back(tensor_ref(kCudaGenerator, get_cuda_rng_state(device.index()), keep));
#endif
  return one_rng_file;
}

// The loss scaler: scale as F64 so it restores bitwise.
checkpoint::FileContent scaler_file_content(const LossScaler& scaler, std::vector<torch::Tensor>& keep) {
  checkpoint::FileContent scaler_file{
      kScalerFile, {}, {{"format", kScalerFileFormat}, {"enabled", scaler.enabled() ? "true" : "false"}}};
  const auto& ss = scaler.state();
  scaler_file.tensors.push_back(tensor_ref(kScalerScale, torch::tensor(ss.scale, torch::kFloat64), keep));
  scaler_file.tensors.push_back(
      tensor_ref(kScalerGrowthTracker, torch::tensor(ss.growth_tracker, torch::kInt64), keep));
  scaler_file.tensors.push_back(tensor_ref(kScalerSkippedSteps, torch::tensor(ss.skipped_steps, torch::kInt64), keep));
  return scaler_file;
}

// zero1/zero2: this rank's optimizer shard, the parameters it owns.
checkpoint::FileContent optimizer_shard_content(const AdamW& opt, const std::vector<int>& owner, int rank, int world,
                                                std::vector<torch::Tensor>& keep) {
  checkpoint::FileContent shard{optimizer_shard_file(rank, world),
                                {},
                                {{"format", kOptimizerShardFileFormat},
                                 {"rank", std::to_string(rank)},
                                 {"world_size", std::to_string(world)},
                                 {"partition", "whole-parameter"}}};
  nlohmann::json index = nlohmann::json::object();
  const auto& ps = opt.params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (owner[i] != rank) continue;
    auto it = opt.state().find(ps[i].name);
    if (it == opt.state().end()) continue;  // never stepped
    add_adamw(shard, ps[i].name, it->second, keep);
    // Global name, global shape and offset of each piece (whole parameters: offset 0).
    index[ps[i].name] = {{"global_shape", ps[i].param.sizes().vec()}, {"offset", 0}, {"numel", ps[i].param.numel()}};
  }
  shard.metadata["index"] = index.dump();
  return shard;
}

// Where the optimizer files of a checkpoint put each parameter's AdamW state.
struct OptimizerFiles {
  std::map<std::string, std::string> where;     // "<param>.step" -> file
  std::map<std::string, nlohmann::json> index;  // shards: param -> {global_shape, offset, numel}
  bool any = false;
};

// A shard's __metadata__ 'index' entry: {global_shape: [int...], offset: int (optional)}.
bool well_formed_piece(const nlohmann::json& piece) {
  if (!piece.is_object() || !piece.contains("global_shape") || !piece["global_shape"].is_array()) return false;
  for (const auto& d : piece["global_shape"])
    if (!d.is_number_integer()) return false;
  return !piece.contains("offset") || piece["offset"].is_number_integer();
}

// A shard's __metadata__ 'index' (JSON), each entry checked, into `index`.
void read_shard_index(const checkpoint::Store::Loaded& c, const std::string& fname, const std::string& text,
                      std::map<std::string, nlohmann::json>& index) {
  nlohmann::json parsed;  // items() must not outlive it
  try {
    parsed = parse_json(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kVerification,
                c.dir + "/" + fname + ": __metadata__ 'index' is not valid JSON: " + printable(e.what()),
                "the optimizer shard is damaged or was not written by anchor; restore from another checkpoint");
  }
  for (const auto& [name, piece] : parsed.items())
    if (!well_formed_piece(piece))
      throw Error(ErrorKind::kVerification,
                  c.dir + "/" + fname + ": __metadata__ 'index' entry for " + name + " is " + piece.dump() +
                      ", expected an object with a global_shape list",
                  "the optimizer shard is damaged or was not written by anchor; restore from another checkpoint");
    else
      index[name] = piece;
}

// optimizer.safetensors (one rank, DDP) or the optimizer-rank* shards of any
// world size: every piece is looked up by its global name.
OptimizerFiles find_optimizer_files(const checkpoint::Store::Loaded& c) {
  OptimizerFiles out;
  for (const auto& [fname, f] : c.files) {
    if (!is_optimizer_file(fname)) continue;
    out.any = true;
    for (const auto& e : f.entries())
      if (const auto param = adamw_step_param(e.name)) out.where[*param] = fname;
    auto m = f.metadata().find("index");
    if (m != f.metadata().end()) read_shard_index(c, fname, m->second, out.index);
  }
  return out;
}

// The AdamW state of the parameters this rank owns (all of them without ZeRO),
// replacing `opt`'s. Returns the file each parameter's state came from.
std::map<std::string, std::string> restore_optimizer(const checkpoint::Store::Loaded& c, AdamW& opt,
                                                     const std::vector<int>& owner, int rank,
                                                     const torch::Device& device) {
  std::map<std::string, std::string> from;
  const OptimizerFiles files = find_optimizer_files(c);
  if (!files.any) file_of(c, kOptimizerFile);  // throws: names the missing file
  auto& state = opt.state();
  state.clear();
  const auto& ps = opt.params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& p = ps[i];
    if (!owner.empty() && owner[i] != rank) continue;  // another rank's shard
    auto it = files.where.find(p.name);
    if (it == files.where.end()) continue;  // never stepped: no state, as in a fresh optimizer
    const auto& of = c.files.at(it->second);
    const auto view = [&](AdamWTensor t) { return view_of(of, it->second, adamw_tensor(p.name, t)); };
    AdamW::State s;
    s.exp_avg = view(AdamWTensor::kExpAvg).to(device, false, /*copy=*/true);
    s.exp_avg_sq = view(AdamWTensor::kExpAvgSq).to(device, false, /*copy=*/true);
    s.step = view(AdamWTensor::kStep).item<std::int64_t>();
    if (auto ix = files.index.find(p.name);
        ix != files.index.end() &&
        (ix->second.value("offset", -1) != 0 ||
         ix->second.at("global_shape").get<std::vector<std::int64_t>>() != p.param.sizes().vec()))
      throw Error(ErrorKind::kVerification,
                  "optimizer shard " + it->second + " holds " + p.name + " as " + ix->second.dump() +
                      ": only whole parameters (offset 0, the model's shape) can be restored",
                  "restore with the model config the checkpoint was saved with");
    if (s.exp_avg.sizes() != p.param.sizes() || s.exp_avg_sq.sizes() != p.param.sizes())
      throw Error(ErrorKind::kVerification, "optimizer state " + p.name + " in " + it->second + " has the wrong shape");
    state[p.name] = std::move(s);
    from[p.name] = it->second;
  }
  return from;
}

// The data digests of what a restore copied byte for byte (Trainer::digest's
// keys): every model tensor (copy_into: same dtype and shape) and each
// parameter's AdamW moments from the file they came from. The step is
// restored by value and hashed again (8 bytes).
KnownDigests restored_digests(const checkpoint::Store::Loaded& c, const std::map<std::string, std::string>& opt_from) {
  KnownDigests known;
  if (const auto m = c.digests.find(kModelFile); m != c.digests.end())
    for (const auto& [tensor, hex] : m->second.tensors) known.emplace("model/" + tensor, hex);
  for (const auto& [param, file] : opt_from) {
    const auto f = c.digests.find(file);
    if (f == c.digests.end()) continue;
    for (const AdamWTensor which : {AdamWTensor::kExpAvg, AdamWTensor::kExpAvgSq}) {
      const std::string tensor = adamw_tensor(param, which);
      if (const auto t = f->second.tensors.find(tensor); t != f->second.tensors.end())
        known.emplace("optimizer/" + tensor, t->second);
    }
  }
  return known;
}

// The generators' states from RNG file `rn`.
void restore_rng_stream(const checkpoint::Store::Loaded& c, const std::string& rn,
                        [[maybe_unused]] const torch::Device& device) {
  const auto& rf = file_of(c, rn);
  set_cpu_rng_state(view_of(rf, rn, kCpuGenerator).clone());
#if defined(ANCHOR_WITH_CUDA)
  if (device.is_cuda()) set_cuda_rng_state(device.index(), view_of(rf, rn, kCudaGenerator).clone());
#endif
}

// Seeds a fresh stream for `rank` from (run seed, step, rank); returns how, for rng_restore().
nlohmann::json rederive_rng_stream(std::uint64_t run_seed, std::int64_t saved_step, int rank, int saved_world,
                                   int world) {
  const std::string from =
      "derive_seed(run.seed, \"dropout/step" + std::to_string(saved_step) + "/rank" + std::to_string(rank) + "\")";
  const auto seed =
      config::derive_seed(run_seed, "dropout/step" + std::to_string(saved_step) + "/rank" + std::to_string(rank));
  torch::manual_seed(seed);
  nlohmann::json record = {{"rank", rank}, {"seed", seed}, {"from", from}};
  ANCHOR_LOG_WARN("restore", "world size {} -> {}: rank {} has no saved RNG stream; re-derived from {}", saved_world,
                  world, rank, from);
  return record;
}

void restore_scaler(const checkpoint::Store::Loaded& c, LossScaler& scaler) {
  auto it = c.files.find(kScalerFile);
  if (it != c.files.end()) {
    LossScaler::State s;
    s.scale = view_of(it->second, kScalerFile, kScalerScale).item<double>();
    s.growth_tracker = view_of(it->second, kScalerFile, kScalerGrowthTracker).item<std::int64_t>();
    s.skipped_steps = view_of(it->second, kScalerFile, kScalerSkippedSteps).item<std::int64_t>();
    if (scaler.enabled()) scaler.set_state(s);
  } else if (scaler.enabled()) {
    throw Error(ErrorKind::kVerification, "checkpoint " + c.dir + " has no scaler.safetensors, but loss scaling is on",
                "resume from a checkpoint saved with train.loss_scale on (a scaler restarting at init_scale diverges)");
  }
}

}  // namespace

RestoreFaults RestoreFaults::from_env() {
  RestoreFaults f;
  for (const auto& item : faults::read("ANCHOR_PILOT_FAULT")) {  // the points: src/common/faults.cpp
    if (item.point == "drop_rng") f.drop_rng = true;
    if (item.point == "drop_optimizer") f.drop_optimizer = true;
    if (item.point == "wrong_step") f.wrong_step = true;
    if (item.point == "drop_scaler") f.drop_scaler = true;
    if (item.point == "diverge_replica") f.diverge_replica = true;
    if (item.point == "profiler_refuses") f.profiler_refuses = true;
  }
  return f;
}

torch::Tensor get_cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

#if defined(ANCHOR_WITH_CUDA)
torch::Tensor get_cuda_rng_state(int index) {
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cuda_rng_state(int index, const torch::Tensor& state) {
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}
#endif

Trainer::Trainer(const config::Config& cfg, int rank, int world_size, const std::string& device)
    : cfg_(cfg),
      rank_(rank),
      world_(world_size),
      total_steps_(total_steps(cfg, world_size)),
      precision_(parse_precision(cfg.train.precision)),
      scaler_(cfg.train.loss_scale, loss_scaling_enabled(cfg.train)) {
  at::set_num_threads(cfg.run.threads);
  threads::bind_blas(cfg.run.threads);  // OpenBLAS's own pool, which at::set_num_threads does not reach
  compat::set_deterministic(cfg.run.deterministic);
  device_ = compat::resolve_device(device.empty() ? cfg.device : device);
  // The rank's GPU becomes the current one, so NCCL and CUDA calls without an
  // explicit device land there too.
  if (device_.is_cuda()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device_);

  data::DataSpec spec;
  spec.format = data::parse_format(cfg.data.format);
  for (const auto& g : cfg.data.train)
    for (auto& f : fs::expand_glob(config::resolve_path(cfg, g))) spec.train_files.push_back(f);
  for (const auto& g : cfg.data.val)
    for (auto& f : fs::expand_glob(config::resolve_path(cfg, g))) spec.val_files.push_back(f);
  spec.val_fraction = cfg.data.val_fraction;
  spec.seq_len = cfg.data.seq_len;
  spec.vocab_size = cfg.model.vocab_size;
  spec.seed = config::derive_seed(cfg.run.seed, "data");
  data_ = std::make_unique<data::Dataset>(spec);

  torch::manual_seed(config::derive_seed(cfg.run.seed, "init"));
  // builtin / safetensors / torchscript, with train.activation_checkpointing.
  model_ = model::make_model(cfg);
  model_->to(device_);  // initialised on the CPU: the same weights whatever the device
  model_->train();

  std::vector<NamedParam> params;
  for (auto& p : model_->named_parameters())
    if (p.value().requires_grad()) params.push_back({p.key(), p.value(), p.value().dim() >= 2});
  opt_ = std::make_unique<AdamW>(std::move(params), cfg.train.optimizer);
  // Dropout draws from here on: its own seed, so init and data never shift it,
  // and each rank its own (config::dropout_purpose), so ranks draw different masks.
  torch::manual_seed(config::derive_seed(cfg.run.seed, config::dropout_purpose(rank_)));
  window_buf_.resize(static_cast<std::size_t>(cfg.data.seq_len) + 1);
  for (const auto& item : faults::read("ANCHOR_GRAD_FAULT"))  // inf:<step> or nan:<step> (src/common/faults.cpp)
    grad_faults_.push_back({item.args[0], item.point == "inf" ? std::numeric_limits<double>::infinity()
                                                              : std::numeric_limits<double>::quiet_NaN()});
}

double Trainer::flops_per_token() const { return model_->flops_per_token(cfg_.data.seq_len); }

void Trainer::set_step_shape(int micro_batch, int seq_len) {
  if (micro_batch < 1 || seq_len < 1 || static_cast<std::size_t>(seq_len) + 1 > window_buf_.size())
    throw Error(ErrorKind::kConfig, "a step shape of micro-batch " + std::to_string(micro_batch) + " x seq_len " +
                                        std::to_string(seq_len) + " is not one this trainer can take (seq_len 1.." +
                                        std::to_string(window_buf_.size() - 1) + ")");
  cfg_.train.micro_batch = micro_batch;
  cfg_.data.seq_len = seq_len;
}

void Trainer::create_optimizer_state() {
  if (pg_) throw Error(ErrorKind::kRuntime, "create_optimizer_state is for one process without a group");
  opt_->create_state();
}

void Trainer::make_batch(std::int64_t step, int micro, torch::Tensor& x, torch::Tensor& y, Sha256& digest) {
  const int mb = cfg_.train.micro_batch, T = cfg_.data.seq_len;
  auto buf = torch::empty({mb, T + 1}, torch::kInt64);
  auto* out = buf.data_ptr<std::int64_t>();
  for (int b = 0; b < mb; ++b) {
    auto g = data::global_sample_index(step, micro, rank_, b, mb, cfg_.train.grad_accum, world_);
    data_->train().copy_window(data_->sampler().window(g), window_buf_.data());
    digest.update(window_buf_.data(), static_cast<std::size_t>(T + 1) * sizeof(std::uint16_t));
    for (int t = 0; t <= T; ++t) out[b * (T + 1) + t] = window_buf_[static_cast<std::size_t>(t)];
  }
  buf = buf.to(device_);
  x = buf.narrow(1, 0, T);
  y = buf.narrow(1, 1, T);
}

double Trainer::forward_backward(Precision p, double scale, StepRecord& r, Sha256& digest) {
  double loss_sum = 0;
  for (int m = 0; m < cfg_.train.grad_accum; ++m) {
    auto t0 = Clock::now();
    torch::Tensor x, y;
    make_batch(step_, m, x, y, digest);
    r.data_wait_s += seconds_since(t0);
    auto t1 = Clock::now();
    torch::Tensor loss;
    {
      AutocastGuard autocast(p, device_.is_cuda());  // the forward only; backward outside it
      loss = model_->loss(x, y) / static_cast<double>(cfg_.train.grad_accum);
    }
    if (scale == 1.0)
      loss.backward();
    else
      (loss * scale).backward();
    loss_sum += loss.item<double>();
    r.compute_s += seconds_since(t1);
    r.tokens += x.numel();
  }
  return loss_sum;
}

StepRecord Trainer::train_step() {
  // Every line, record and fault names this step by its number counted from 1 (docs/report.md,
  // "Step numbers"): step n runs after n-1 steps, and checkpoint step-n holds the state after it.
  const std::int64_t n = step_ + 1;
  StepRecord r;
  r.step = n;
  Sha256 digest;
  opt_->zero_grad();
  r.loss_scale = scaler_.scale();
  double loss_sum = forward_backward(precision_, r.loss_scale, r, digest);
  inject_grad_faults(grad_faults_, n, opt_->params());
  if (pg_) {
    if (rank_ == fault_rank_ && n == fault_step_) kill_before_allreduce(rank_, n);
    double sync_s = 0;
    if (strategy_ == Strategy::kDdp) {
      // DDP: average the gradients (and the loss, for the record) over the ranks.
      std::vector<torch::Tensor> ps;
      ps.reserve(opt_->params().size());
      for (const auto& p : opt_->params()) ps.push_back(p.param);
      sync_s = dist::allreduce_gradients(*pg_, ps, bucket_bytes_, n).seconds;
    } else {
      // zero1/zero2: gradients averaged (all-reduce, or reduce to each owner) and clipped by the global norm.
      if (scaler_.enabled() && r.loss_scale != 1.0) unscale_gradients(opt_->params(), r.loss_scale);
      ZeroSyncStats zs;
      r.grad_norm =
          zero_sync_and_clip(*pg_, *opt_, owner_, strategy_, bucket_bytes_, n, cfg_.train.optimizer.grad_clip, &zs);
      sync_s = zs.seconds;
    }
    auto t3 = Clock::now();
    auto l = torch::tensor({loss_sum}, torch::kFloat64).to(device_);  // NCCL reduces device tensors only
    pg_->allreduce_sum(l, "loss all-reduce (step " + std::to_string(n) + ")");
    loss_sum = l.item<double>() / pg_->size();
    r.comm_s = sync_s + seconds_since(t3);
  }
  const bool sharded = pg_ && strategy_ != Strategy::kDdp;
  auto t2 = Clock::now();
  const bool apply = !scaler_.enabled() || unscale_and_update_scaler(scaler_, opt_->params(), sharded, n, r);
  r.lr = lr_at(cfg_.train, step_, total_steps_);
  if (apply) apply_update(*opt_, owner_, rank_, sharded, cfg_.train.optimizer.grad_clip, r);
  compat::synchronize(device_);  // the step's time and peak memory include its optimizer kernels
  r.compute_s += seconds_since(t2);
  if (sharded) r.comm_s += zero_broadcast_parameters(*pg_, *opt_, owner_, bucket_bytes_, n);
  if (pg_ && check_replicas_) {
    auto t4 = Clock::now();
    dist::check_replicated(*pg_, parameter_digest(), n, "step");
    r.replica_check_s = seconds_since(t4);
  }
  r.loss = loss_sum;
  r.batch_digest = digest.hex();
  ++step_;
  return r;
}

void Trainer::attach(dist::ProcessGroup* pg, std::int64_t bucket_bytes, bool check_replicas) {
  if (pg && pg->size() != world_)
    throw Error(ErrorKind::kRuntime, "trainer built for " + std::to_string(world_) + " ranks attached to a group of " +
                                         std::to_string(pg->size()));
  pg_ = pg;
  bucket_bytes_ = std::max<std::int64_t>(1, bucket_bytes);
  check_replicas_ = check_replicas;
  strategy_ = parse_strategy(cfg_.distributed.strategy);
  owner_.clear();
  if (pg && strategy_ != Strategy::kDdp) {
    std::vector<std::int64_t> numels;
    for (const auto& p : opt_->params()) numels.push_back(p.param.numel());
    owner_ = partition_parameters(numels, world_);
  }
  // The step-time seam (sigkill:<rank>:<step>); the others are read where they act.
  if (const auto f = dist::dist_fault(); f.point == dist::DistFault::Point::kStep) {
    fault_rank_ = f.rank;
    fault_step_ = f.step;
  }
}

std::string Trainer::parameter_digest() const {
  Sha256 h;
  for (const auto& p : model_->named_parameters()) h.update(p.key() + ":" + tensor_digest(p.value()) + "\n");
  return h.hex();
}

double Trainer::evaluate(int batches) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const int mb = cfg_.train.micro_batch, T = cfg_.data.seq_len;
  const auto& val = data_->val();
  double sum = 0;
  auto buf = torch::empty({mb, T + 1}, torch::kInt64);
  for (int i = 0; i < batches; ++i) {
    auto* out = buf.data_ptr<std::int64_t>();
    for (int b = 0; b < mb; ++b) {
      val.copy_window((static_cast<std::size_t>(i) * mb + b) % val.size(), window_buf_.data());
      for (int t = 0; t <= T; ++t) out[b * (T + 1) + t] = window_buf_[static_cast<std::size_t>(t)];
    }
    auto dbuf = buf.to(device_);
    AutocastGuard autocast(precision_, device_.is_cuda());
    sum += model_->loss(dbuf.narrow(1, 0, T), dbuf.narrow(1, 1, T)).item<double>();
  }
  model_->train();
  return sum / batches;
}

std::string Trainer::rng_file_name() const { return rng_file(rank_, world_); }

checkpoint::SaveRequest Trainer::save_request(std::vector<torch::Tensor>& keep,
                                              const nlohmann::json& extra_state) const {
  keep.clear();
  keep.reserve(8 * opt_->params().size() + 64);  // refs point into it: no reallocation
  checkpoint::SaveRequest req;
  req.step = step_;
  checkpoint::FileContent model_file{kModelFile, {}, {{"format", kModelFileFormat}}};
  for (const auto& p : model_->named_parameters()) model_file.tensors.push_back(tensor_ref(p.key(), p.value(), keep));
  for (const auto& b : model_->named_buffers()) model_file.tensors.push_back(tensor_ref(b.key(), b.value(), keep));
  checkpoint::FileContent opt_file{kOptimizerFile, {}, {{"format", kOptimizerFileFormat}}};
  for (const auto& [name, s] : opt_->state()) add_adamw(opt_file, name, s, keep);
  checkpoint::FileContent one_rng_file = one_rng_file_content(device_, keep);
  checkpoint::FileContent scaler_file = scaler_file_content(scaler_, keep);
  if (world_ > 1) {
    // Per-rank files: what this rank writes into the shared save.
    if (rank_ == 0) req.files.push_back(std::move(model_file));
    if (pg_ && strategy_ != Strategy::kDdp)
      req.files.push_back(optimizer_shard_content(*opt_, owner_, rank_, world_, keep));
    else if (rank_ == 0)
      req.files.push_back(std::move(opt_file));
    checkpoint::FileContent f{
        rng_file(rank_, world_), {}, {{"format", kRngFileFormat}, {"rank", std::to_string(rank_)}}};
    f.tensors.push_back(tensor_ref(kCpuGenerator, get_cpu_rng_state(), keep));
    req.files.push_back(std::move(f));
  } else {
    req.files = {std::move(model_file), std::move(opt_file), std::move(one_rng_file)};
  }
  // One writer of the scaler (identical on every rank): rank 0 in a per-rank save.
  if (world_ == 1 || rank_ == 0) req.files.push_back(std::move(scaler_file));

  const auto& ss = scaler_.state();
  StateFields fields;
  fields.step = step_;
  fields.schedule = cfg_.train.schedule.kind;
  fields.next_lr = lr_at(cfg_.train, step_, total_steps_);
  fields.total_steps = total_steps_;
  fields.precision = precision_name(precision_);
  fields.loss_scale_enabled = scaler_.enabled();
  fields.scale = ss.scale;
  fields.growth_tracker = ss.growth_tracker;
  fields.skipped_steps = ss.skipped_steps;
  fields.world_size = world_;
  fields.strategy = pg_ ? strategy_name(strategy_) : "ddp";
  fields.threads = cfg_.run.threads;
  fields.libtorch = compat::torch_version();
  fields.config_digest = config::digest(cfg_);
  req.state = state_json(fields, extra_state.is_object() ? extra_state : nlohmann::json::object());
  return req;
}

KnownDigests Trainer::known_digests(const std::map<std::string, checkpoint::TensorDigests>& files) const {
  // The model file, and this rank's optimizer file (optimizer.safetensors, or
  // its shard under ZeRO: the parameters it owns, the ones it holds state of).
  KnownDigests k;
  for (const auto& [file, d] : files) {
    const char* group = file == kModelFile ? "model/" : is_optimizer_file(file) ? "optimizer/" : nullptr;
    if (group)
      for (const auto& [tensor, hex] : d.tensors) k.emplace(group + tensor, hex);
  }
  return k;
}

KnownDigests Trainer::restore(const checkpoint::Store::Loaded& c, const RestoreFaults& faults) {
  torch::NoGradGuard no_grad;
  // Every field read below, type-checked first: a bad one is a verification
  // error naming state.json and the field, before any tensor is touched.
  const SavedState saved = read_saved_state(c.state, c.dir + "/state.json");
  check_file_formats(c);  // a file of another format is refused before any tensor is read
  const auto& mf = file_of(c, kModelFile);
  for (auto& p : model_->named_parameters()) copy_into(p.value(), view_of(mf, kModelFile, p.key()), p.key());
  for (auto& b : model_->named_buffers()) copy_into(b.value(), view_of(mf, kModelFile, b.key()), b.key());

  const std::int64_t saved_step = saved.step;
  std::map<std::string, std::string> opt_from;
  if (!faults.drop_optimizer) opt_from = restore_optimizer(c, *opt_, owner_, rank_, device_);
  const int saved_world = saved.world_size;
  rng_restore_ = {{"saved_world_size", saved_world},
                  {"world_size", world_},
                  {"carried", nlohmann::json::array()},
                  {"rederived", nlohmann::json::array()},
                  {"dropped", nlohmann::json::array()}};
  for (int r = world_; r < saved_world; ++r) rng_restore_["dropped"].push_back(r);
  if (!faults.drop_rng) {
    if (rank_ < saved_world) {
      // Same world size: this rank's own stream. Otherwise saved rank r's stream for rank r.
      restore_rng_stream(c, rng_file(rank_, saved_world), device_);
      rng_restore_["carried"].push_back(rank_);
    } else {
      // No saved stream for this rank: a fresh one from (run seed, step, rank).
      rng_restore_["rederived"].push_back(rederive_rng_stream(cfg_.run.seed, saved_step, rank_, saved_world, world_));
    }
  }
  if (!faults.drop_scaler) restore_scaler(c, scaler_);
  step_ = saved_step + (faults.wrong_step ? 1 : 0);
  KnownDigests known = restored_digests(c, opt_from);
  // Names that share storage (tied weights) hold the bytes copied last, not
  // necessarily their own file entry's: those are hashed again.
  std::map<const void*, std::vector<std::string>> by_storage;
  const auto note = [&](const std::string& name, const torch::Tensor& t) {
    if (t.defined() && t.has_storage())
      by_storage[t.storage().unsafeGetStorageImpl()].push_back("model/" + name);
    else
      known.erase("model/" + name);
  };
  for (const auto& p : model_->named_parameters()) note(p.key(), p.value());
  for (const auto& b : model_->named_buffers()) note(b.key(), b.value());
  for (const auto& [storage, names] : by_storage)
    if (names.size() > 1)
      for (const auto& n : names) known.erase(n);
  return known;
}

nlohmann::json Trainer::sharding() const {
  const auto b = state_bytes();
  std::int64_t opt_ddp = 0, grad_ddp = 0, owned = 0, owned_el = 0, total_el = 0;
  const auto& ps = opt_->params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto nb = static_cast<std::int64_t>(ps[i].param.nbytes());
    opt_ddp += 2 * nb + static_cast<std::int64_t>(sizeof(std::int64_t));  // exp_avg, exp_avg_sq, step
    grad_ddp += nb;
    total_el += ps[i].param.numel();
    if (owner_.empty() || owner_[i] == rank_) {
      ++owned;
      owned_el += ps[i].param.numel();
    }
  }
  return {{"strategy", pg_ ? strategy_name(strategy_) : "ddp"},
          {"rank", rank_},
          {"world_size", world_},
          {"owned_parameters", owned},
          {"owned_elements", owned_el},
          {"total_elements", total_el},
          {"optimizer_bytes", b.optimizer},
          {"optimizer_bytes_ddp", opt_ddp},
          {"gradient_bytes", b.gradients},
          {"gradient_bytes_ddp", grad_ddp}};
}

StateBytes Trainer::state_bytes() const {
  StateBytes b;
  for (const auto& p : model_->parameters()) {
    b.parameters += static_cast<std::int64_t>(p.nbytes());
    if (p.grad().defined()) b.gradients += static_cast<std::int64_t>(p.grad().nbytes());
  }
  for (const auto& [name, s] : opt_->state())
    b.optimizer += static_cast<std::int64_t>(s.exp_avg.nbytes() + s.exp_avg_sq.nbytes() + sizeof(s.step));
  return b;
}

StateDigest Trainer::digest(const KnownDigests& known) const {
  StateDigest out;
  auto& tensors = out.tensors;
  Sha256 model_h, opt_h, rng_h;
  for (const auto& p : model_->named_parameters()) {
    const std::string key = "model/" + p.key();
    auto d = tensor_digest(p.value(), find_known(known, key));
    tensors[key] = d;
    model_h.update(p.key() + ":" + d + "\n");
  }
  // Buffers (a user's BatchNorm statistics, masks) are model state too; the
  // built-in GPT has none.
  for (const auto& b : model_->named_buffers()) {
    const std::string key = "model/" + b.key();
    auto d = tensor_digest(b.value(), find_known(known, key));
    tensors[key] = d;
    model_h.update(b.key() + ":" + d + "\n");
  }
  for (const auto& [name, s] : opt_->state()) {
    for (const auto& [which, t] : {std::pair<AdamWTensor, torch::Tensor>{AdamWTensor::kExpAvg, s.exp_avg},
                                   {AdamWTensor::kExpAvgSq, s.exp_avg_sq},
                                   {AdamWTensor::kStep, torch::tensor(s.step, torch::kInt64)}}) {
      const std::string tensor = adamw_tensor(name, which);
      // The step is hashed here: 8 bytes, and restored by value (item()), not by its bytes.
      auto d = tensor_digest(t, which == AdamWTensor::kStep ? nullptr : find_known(known, "optimizer/" + tensor));
      tensors["optimizer/" + tensor] = d;
      opt_h.update(tensor + ":" + d + "\n");
    }
  }
  Sha256 scaler_h;
  const auto& ss = scaler_.state();
  for (const auto& [name, t] :
       {std::pair<const char*, torch::Tensor>{"scale", torch::tensor(ss.scale, torch::kFloat64)},
        {"growth_tracker", torch::tensor(ss.growth_tracker, torch::kInt64)},
        {"skipped_steps", torch::tensor(ss.skipped_steps, torch::kInt64)}}) {
    auto d = tensor_digest(t);
    tensors[std::string("scaler/") + name] = d;
    scaler_h.update(std::string(name) + ":" + d + "\n");
  }
  auto rd = tensor_digest(get_cpu_rng_state());
  tensors["rng/cpu_generator"] = rd;
  rng_h.update("cpu_generator:" + rd + "\n");
#if defined(ANCHOR_WITH_CUDA)
  if (device_.is_cuda()) {
    auto cd = tensor_digest(get_cuda_rng_state(device_.index()));
    tensors["rng/cuda_generator"] = cd;
    rng_h.update("cuda_generator:" + cd + "\n");
  }
#endif
  out.model = model_h.hex();
  out.optimizer = opt_h.hex();
  out.rng = rng_h.hex();
  out.scaler = scaler_h.hex();
  out.loss_scale = ss.scale;
  out.step = step_;
  return out;
}

}  // namespace anchor::train
