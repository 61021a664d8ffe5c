// A pilot worker: a fresh process the supervisor starts from its own binary.
//
// Reference worker (A): load (from initialisation, or the newest committed
// checkpoint restored: pilot.start_from latest), train K steps, eval, save + commit step S+K, go on
// R steps as the reference, then begin a second save and wait to be SIGKILLed
// in the middle of it. Resume worker (B): restore the newest committed
// checkpoint (skipping the torn one), eval, resume R steps.
// Each writes work/<role>.json; the supervisor compares them.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <filesystem>
#include <functional>
#include <set>

#include "anchor/build_info.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/common/copy_verified.hpp"
#include "anchor/common/faults.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/error.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/threads.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/log.hpp"
#include "anchor/manifest/environment.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/model/hf_export.hpp"
#include "anchor/measure/proc.hpp"
#include "anchor/worker/worker.hpp"
#include "anchor/protocol/worker_result.hpp"
#include "anchor/plan/memory_model.hpp"
#include "anchor/train/state_format.hpp"
#include "anchor/train/sharded_checkpoint.hpp"
#include "anchor/train/trainer.hpp"
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>
#include "activation_probe.hpp"
#include "op_recorder.hpp"
#include "compat/torch_compat.hpp"
#include "anchor/protocol/events.hpp"
#include "anchor/protocol/progress.hpp"
#include "anchor/protocol/work_files.hpp"

namespace anchor::worker {
namespace {

struct WorkerContext {
  protocol::Spec spec;  // what the supervisor told this worker (ANCHOR_PILOT_SPEC)
  config::Config cfg;
  std::string run_dir;
  std::string ckpt_dir;
  std::int64_t k = 0, r = 0;               // the steps before the save and after it (the spec's, from its start)
  std::string run_id;                      // recorded in the state.json of every checkpoint this run saves
  std::string copy_to;                     // the supervisor's export.copy_to; empty: no copy_off
  dist::LaunchEnv env;                     // rank and world (one rank: the defaults)
  std::unique_ptr<dist::ProcessGroup> pg;  // only with several ranks
  std::string device;                      // this rank's device (dist::rank_device); empty: cfg.device
  train::RestoreFaults faults;             // ANCHOR_PILOT_FAULT, read once on every rank (a typo fails every rank)
  protocol::WorkerResult out;              // becomes work/<role>.json
};

// The spec's steps as the built-in worker runs them: worker A saves at
// save_at [K, K + R] (counted from its start) and is killed in its save of
// K + R (stop_at, kill_in_save); worker B restores the newest committed step
// that verifies and runs to stop_at.
// Anything else is not a spec this worker can follow (Error kRuntime).
void take_steps(WorkerContext& ctx) {
  const protocol::Spec& s = ctx.spec;
  const std::string what = "pilot spec " + printable(std::getenv(protocol::kSpecEnv));
  const char* hint = "the spec is written by the anchor that starts the worker; run the worker through that anchor";
  if (s.events != protocol::kEventsOnStdout || s.role == protocol::Role::kProbe || s.digests_every != 0)
    throw Error(ErrorKind::kRuntime,
                what +
                    ": the built-in worker reports on its stdout (events \"-\") as worker A or B, without "
                    "digests_every",
                hint);
  if (s.seed != ctx.cfg.run.seed || s.deterministic != ctx.cfg.run.deterministic)
    throw Error(ErrorKind::kRuntime, what + ": its seed and deterministic are not the run's config.json's", hint);
  if (s.role == protocol::Role::kReference) {
    if (s.save_at.size() != 2 || s.restore || s.kill_in_save != s.stop_at || s.save_at[1] != s.stop_at ||
        s.stop_at <= s.save_at[0] || s.save_at[0] < 2)
      throw Error(ErrorKind::kRuntime,
                  what + ": worker A saves at [K, stop_at] (K >= 2) and is killed in its save of stop_at", hint);
    ctx.k = s.save_at[0];
    ctx.r = s.stop_at - s.save_at[0];
    if (ctx.k != ctx.cfg.pilot.steps_before_save || ctx.r != ctx.cfg.pilot.steps_after_resume)
      throw Error(ErrorKind::kRuntime,
                  what + ": its K " + std::to_string(ctx.k) + " and R " + std::to_string(ctx.r) +
                      " are not the run's pilot.steps_before_save and pilot.steps_after_resume",
                  hint);
  } else if (!s.save_at.empty() || s.restore || s.kill_in_save || s.start_latest) {
    throw Error(ErrorKind::kRuntime, what + ": worker B restores the newest step that verifies and saves none", hint);
  }
}

WorkerContext load_context() {
  WorkerContext ctx;
  const char* spec_path = std::getenv(protocol::kSpecEnv);
  if (!spec_path || !*spec_path)
    throw Error(ErrorKind::kUsage,
                std::string(protocol::kSpecEnv) +
                    " is unset: a pilot worker is told its task by "
                    "the spec file it names",
                "anchor pilot starts its workers; run `anchor pilot CONFIG`");
  ctx.spec = protocol::read_spec(spec_path);
  ctx.run_dir = ctx.spec.run_dir;
  ctx.ckpt_dir = ctx.spec.checkpoint_dir;  // the supervisor's choice (reproduce keeps its own)
  auto doc = nlohmann::json::parse(fs::read_file(ctx.run_dir + "/config.json"));
  ctx.cfg = config::from_json(doc.at("config"));
  ctx.cfg.base_dir = path_field(doc, "base_dir");
  ctx.cfg.source_path = path_field(doc, "source_path");
  ctx.run_id = doc.value("run_id", "");
  if (doc.contains("copy_to") || doc.contains("copy_to_hex")) ctx.copy_to = path_field(doc, "copy_to");
  ctx.faults = train::RestoreFaults::from_env();
  take_steps(ctx);
  return ctx;
}

// Peak tensor memory of one stage: reset when it starts, read when it ends.
class StageMemory {
 public:
  explicit StageMemory(std::string device) : device_(std::move(device)) { measure::reset_peak(device_); }
  protocol::MemoryReading reading() const { return {measure::tensor_memory(device_), measure::read_proc_memory(), ""}; }
  // The stage's reading for its figures, said also as the protocol's `memory` line of `stage`.
  nlohmann::json read_and_report(const std::string& stage) const {
    const protocol::MemoryReading m = reading();
    protocol::MemoryLine l;
    l.stage = stage;
    l.device = device_;
    l.allocated_bytes = m.tensors.allocated_bytes;
    l.max_allocated_bytes = m.tensors.peak_allocated_bytes;
    if (m.tensors.reserved_bytes >= 0) l.reserved_bytes = m.tensors.reserved_bytes;
    if (m.tensors.device_total_bytes >= 0) l.total_bytes = m.tensors.device_total_bytes;
    l.rss_bytes = static_cast<std::int64_t>(m.process.rss_bytes);
    protocol::emit(l);
    return m.to_json();
  }

 private:
  std::string device_;
};

// Whose steps a line shows and how far they go: "A step 3/4" is worker A's
// third completed step of the four it runs to (B, the resumed worker, runs
// to the same step). About 20 lines at info (StepLineRule), each one at debug
// when the supervisor draws this worker's live line (kLiveProgressEnv) from
// rank 0's `step` lines, which it sends for every step.
struct StepProgress {
  const char* worker;  // "A" (reference) or "B" (resume)
  std::int64_t start;  // the step count this worker started from
  std::int64_t end;    // the step count it stops at
  int rank = 0, world = 1;
};

StepProgress progress(const WorkerContext& ctx, const char* worker, std::int64_t start, std::int64_t end) {
  return {worker, start, end, ctx.env.rank, ctx.env.world_size};
}

// A step as the worker protocol reports it (only rank 0's lines reach the supervisor).
protocol::StepLine step_line_of(const train::StepRecord& r, std::int64_t stop_at) {
  protocol::StepLine l;
  l.step = r.step;
  l.loss = {true, r.loss};
  l.grad_norm = {true, r.grad_norm};
  l.lr = {true, r.lr};
  l.tokens = r.tokens;
  l.data_wait_s = r.data_wait_s;
  l.compute_s = r.compute_s;
  l.stop_at = stop_at;
  return l;
}

// The measured step's peak as the protocol's step_memory line: the peak since
// the reset right before the step, from the allocator; the state's bytes. What
// the process held before its first step is not measured here (null).
protocol::StepMemoryLine step_memory_line(std::int64_t step, const std::string& device,
                                          const protocol::MemoryReading& m, const train::StateBytes& state) {
  protocol::StepMemoryLine l;
  l.step = step;
  l.device = device;
  l.peak_source = m.tensors.source;
  l.peak_bytes = m.tensors.peak_allocated_bytes;
  l.parameters_bytes = state.parameters;
  l.gradients_bytes = state.gradients;
  l.optimizer_bytes = state.optimizer;
  return l;
}

// A state digest as the protocol's per-component digests line: `when` is save, restore or final.
protocol::DigestsLine digests_line(const char* when, const train::StateDigest& d) {
  protocol::DigestsLine l;
  l.step = d.step;
  l.when = when;
  l.components = {{"model", d.model}, {"optimizer", d.optimizer}, {"rng", d.rng}};
  if (d.scaler) l.components.emplace_back("scaler", *d.scaler);
  return l;
}

// The checkpoint line of `op` (save | restore) and `phase` at `step`.
protocol::CheckpointLine checkpoint_line(const char* op, const char* phase, std::optional<std::int64_t> step,
                                         std::string dir) {
  protocol::CheckpointLine l;
  l.op = op;
  l.phase = phase;
  l.step = step;
  l.dir = std::move(dir);
  return l;
}

// How a step is run when not plainly: worker B's last one, under the profiler.
using StepFn = std::function<train::StepRecord(train::Trainer&)>;

std::vector<train::StepRecord> run_steps(train::Trainer& t, int n, const StepProgress& at, const StepFn& last = {}) {
  std::vector<train::StepRecord> steps;
  const protocol::StepLineRule rule(at.start, at.end);
  const bool live = protocol::live_progress_requested();
  const std::string who = at.world > 1 ? fmt::format("{} rank {}", at.worker, at.rank) : std::string(at.worker);
  double spent_s = 0;
  for (int i = 0; i < n; ++i) {
    auto r = last && i + 1 == n ? last(t) : t.train_step();
    const double step_s = r.compute_s + r.data_wait_s;
    spent_s += step_s;
    protocol::StepShown shown;
    shown.done = r.step;
    shown.end = at.end;
    shown.loss = r.loss;
    shown.grad_norm = r.grad_norm;
    shown.lr = r.lr;
    shown.tokens_per_s = step_s > 0 ? static_cast<double>(r.tokens) / step_s : 0.0;
    shown.step_s = step_s;
    shown.eta_s = spent_s / (i + 1) * static_cast<double>(std::max<std::int64_t>(0, at.end - shown.done));
    const auto level = !live && rule.shown(shown.done) ? log::Level::kInfo : log::Level::kDebug;
    ANCHOR_LOG_AT(level, "train_step", "{}", protocol::step_line(who, shown));
    protocol::emit(step_line_of(r, at.end));
    // A non-finite loss or applied gradient poisons every later step: fail
    // here, naming it (a step the loss scaler skipped is not applied).
    if (!std::isfinite(r.loss) || (!r.skipped && !std::isfinite(r.grad_norm)))
      throw Error(ErrorKind::kVerification,
                  "step " + std::to_string(r.step) + ": non-finite " +
                      (std::isfinite(r.loss) ? std::string("gradient norm") : std::string("loss")) +
                      (r.nonfinite_grad.empty() ? std::string() : " (gradient of " + r.nonfinite_grad + ")"),
                  "with train.precision bf16/fp16 turn on train.loss_scale.enabled to skip such steps; else "
                  "lower train.optimizer.lr or check the data (docs/precision.md)");
    steps.push_back(r);
  }
  return steps;
}

// An eval loss that is inf/NaN fails the worker here, naming it (JSON would
// carry it as null, and every later comparison with it is meaningless).
double finite_eval_loss(double loss, const std::string& which) {
  if (!std::isfinite(loss))
    throw Error(ErrorKind::kVerification, which + ": non-finite validation loss (" + std::to_string(loss) + ")",
                "with train.precision bf16/fp16 check the precision stage's figures (docs/precision.md); else lower "
                "train.optimizer.lr or check the data");
  return loss;
}

// The trainer of this rank; with several ranks DDP over the worker's group.
std::unique_ptr<train::Trainer> make_trainer(WorkerContext& ctx) {
  auto t = std::make_unique<train::Trainer>(ctx.cfg, ctx.env.rank, ctx.env.world_size, ctx.device);
  // The replicas are compared where it matters, before each save and at the
  // end (check_replicas below), not after every step: each check hashes every parameter.
  if (ctx.pg)
    t->attach(ctx.pg.get(), static_cast<std::int64_t>(ctx.cfg.distributed.bucket_mb * 1024.0 * 1024.0),
              /*check_replicas=*/false);
  return t;
}

// Several ranks: every rank holds the same parameters (DDP, and ZeRO after its
// broadcast), or the check fails naming the ranks that differ (exit 3).
// Returns its seconds (0 on one rank).
double check_replicas(WorkerContext& ctx, const train::Trainer& t) {
  if (!ctx.pg) return 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  dist::check_replicated(*ctx.pg, t.parameter_digest(), t.step(), "worker");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ANCHOR_PILOT_FAULT=diverge_replica: rank 1 of worker A nudges its first
// parameter after its K steps and eval, right before the save: the negative
// control of the check there (ZeRO's broadcast at the end of a step would
// undo a nudge made before a step).
void diverge_replica_fault(WorkerContext& ctx, train::Trainer& t) {
  if (ctx.env.rank != 1 || !ctx.faults.diverge_replica) return;
  ANCHOR_LOG_WARN("train", "fault injection active (ANCHOR_PILOT_FAULT=diverge_replica): rank 1's parameters diverge");
  torch::NoGradGuard no_grad;
  auto params = t.model().named_parameters();
  params[0].value().add_(1e-3);
}

// The checkpoint of step t.step(). One rank: a plain save. Several: every rank
// writes its own files (its RNG stream; zero1/zero2: its optimizer shard; rank
// 0 also the model, and the optimizer under DDP) into rank 0's temp directory
// and reports their digests; rank 0 commits once every rank has; a barrier
// keeps every rank here until the commit is done (a rank killed in between
// leaves no COMMITTED: train/sharded_checkpoint.hpp).
// `written` receives the digests of the files this process wrote.
std::optional<checkpoint::SaveResult> save_checkpoint(
    WorkerContext& ctx, train::Trainer& t, checkpoint::Store& store, const nlohmann::json& extra,
    const checkpoint::Hook& hook = {}, double* replica_check_s = nullptr,
    std::map<std::string, checkpoint::TensorDigests>* written = nullptr) {
  const double check_s = check_replicas(ctx, t);  // never a checkpoint of replicas that disagree
  if (replica_check_s) *replica_check_s = check_s;
  std::vector<torch::Tensor> keep;
  if (ctx.pg) return train::save_distributed(*ctx.pg, store, t.save_request(keep, extra), hook, written);
  auto res = store.save(t.save_request(keep, extra), hook);
  if (written) *written = res.digests;
  return res;
}

nlohmann::json save_figures(const checkpoint::SaveResult& s) {
  return {{"dir", s.dir},
          {"bytes", s.bytes},
          {"seconds", s.seconds},
          {"gb_per_s", s.seconds > 0 ? static_cast<double>(s.bytes) / s.seconds / 1e9 : 0.0}};
}

void write_result(WorkerContext& ctx, const std::string& role) {
  auto mem = measure::read_proc_memory();
  protocol::WorkerResult& out = ctx.out;
  out.role = role;
  out.pid = ::getpid();
  out.rss_bytes = static_cast<std::int64_t>(mem.rss_bytes);
  out.peak_rss_bytes = static_cast<std::int64_t>(mem.hwm_bytes);
  if (ctx.env.distributed()) {
    out.rank = ctx.env.rank;
    out.world_size = ctx.env.world_size;
    out.backend = ctx.pg->backend();
  }
  fs::atomic_write_file(protocol::work::result(ctx.run_dir, role, ctx.env.rank), dump_json(out.to_json(), 2));
}

// The stages finished so far (work::stages_so_far): what a failure later in this worker leaves
// to the report. Rank 0's only; a few hundred bytes a stage.
void write_stages_so_far(const WorkerContext& ctx, const std::string& role) {
  if (ctx.env.rank != 0) return;
  fs::atomic_write_file(
      protocol::work::stages_so_far(ctx.run_dir, role),
      dump_json({{"stages", ctx.out.stages}, {"train_steps", train::steps_json(ctx.out.train_steps)}}));
}

// run.threads governs every pool the worker runs (docs/config.md): LibTorch's
// intra-op and inter-op pools and the BLAS library's own (OpenBLAS with
// pthreads keeps one that at::set_num_threads does not reach). Called first,
// before any parallel work: the inter-op pool can be sized only then.
void bind_threads(int n, bool deterministic) {
  if (deterministic) threads::request_reproducible_blas();  // before MKL's first call
  at::set_num_threads(n);
  try {
    at::set_num_interop_threads(n);
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("worker", "could not size LibTorch's inter-op pool to {}: {}", n, compat::message_of(e));
  }
  const auto blas = threads::bind_blas(n);
  if (deterministic && n > 1 && blas.library == "mkl" && blas.reproducible == "off")
    ANCHOR_LOG_WARN("worker",
                    "MKL's conditional numerical reproducibility is {} (MKL_CBWR): with run.threads {} its sums may "
                    "change order from run to run and a resume may not match bitwise; unset MKL_CBWR or set it to AUTO",
                    blas.reproducible, n);
}

// What is in effect, for the manifest.
nlohmann::json threads_json(int configured) {
  const auto blas = threads::blas();
  return {{"run_threads", configured},
          {"intra_op", at::get_num_threads()},
          {"inter_op", at::get_num_interop_threads()},
          {"blas",
           {{"library", blas.library.empty() ? nlohmann::json() : nlohmann::json(blas.library)},
            {"threads", blas.threads >= 0 ? nlohmann::json(blas.threads) : nlohmann::json()},
            {"reproducible", blas.reproducible.empty() ? nlohmann::json() : nlohmann::json(blas.reproducible)}}},
          {"wait_env", threads::pool_wait_json()}};
}

// Pins the run before anything trains, in the process that trains: the
// manifest's shared libraries and runtime versions are this process's
// (docs/manifest.md). `anchor reproduce` has pinned already: its manifest stands.
void pin_stage(WorkerContext& ctx, bool use_cache) {
  const std::string path = ctx.run_dir + "/manifest.json";
  protocol::StageTimer pin("pin");
  const bool reused = std::filesystem::exists(path);
  nlohmann::json m;
  if (reused) {
    m = nlohmann::json::parse(fs::read_file(path));
  } else {
    manifest::PinOptions po;
    po.use_cache = use_cache;
    po.progress = false;  // stdout carries events; a progress line would interleave with the supervisor's
    po.world_size = ctx.env.world_size;
    m = manifest::pin(ctx.cfg, po);
    m["threads"] = threads_json(ctx.cfg.run.threads);
    fs::atomic_write_file(path, m.dump(2));
  }
  ctx.out.stages.push_back(pin.end({{"manifest", "manifest.json"},
                                    {"manifest_sha256", sha256_hex(m.dump(2))},
                                    {"reused", reused},
                                    {"shared_libraries", m["dependencies"]["shared_libraries"].size()},
                                    {"files_hashed", m["hashing"].value("files_hashed", 0)}}));
}

// ---- pilot.start_from latest (docs/pilot.md, "Starting from a checkpoint") ----

// Config keys that make a checkpoint another run's: a different model, a
// different data stream (batches are a pure function of run.seed, step and
// rank, read from files of data.format). Any other difference is allowed and
// reported (a restart may change the learning rate, the ranks, the batch split).
bool refuses_start(const std::string& key) {
  static const char* kKeys[] = {"model.source",     "model.arch",       "model.n_layer", "model.n_head", "model.n_embd",
                                "model.vocab_size", "model.block_size", "model.bias",    "run.seed",     "data.format"};
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

// Every config key whose value differs: {"key", "checkpoint", "config", "refused"}.
// pilot.*, checkpoint.* and report.* say how this pilot runs, not what it trains: not compared.
nlohmann::json config_differences(const nlohmann::json& saved, const nlohmann::json& now) {
  // The leaves of both configs as JSON pointers ("/model/n_layer"); a list
  // ("/data/files/0", flatten()'s spelling of its elements) is compared whole.
  std::set<std::string> pointers;
  for (const auto* doc : {&saved, &now}) {
    const auto flat = doc->flatten();  // items() refers into it: not a temporary
    for (const auto& it : flat.items()) {
      std::string ptr = it.key();
      const auto slash = ptr.find_last_of('/');
      if (slash > 0 && ptr.find_first_not_of("0123456789", slash + 1) == std::string::npos) ptr.resize(slash);
      pointers.insert(ptr);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& ptr : pointers) {
    std::string key = ptr.substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    if (key.rfind("pilot.", 0) == 0 || key.rfind("checkpoint.", 0) == 0 || key.rfind("report.", 0) == 0) continue;
    const nlohmann::json::json_pointer jp(ptr);
    const auto va = saved.contains(jp) ? saved.at(jp) : nlohmann::json();
    const auto vb = now.contains(jp) ? now.at(jp) : nlohmann::json();
    if (va != vb) out.push_back({{"key", key}, {"checkpoint", va}, {"config", vb}, {"refused", refuses_start(key)}});
  }
  return out;
}

// The model's tensors against the checkpoint's model.safetensors: names and
// shapes, both ways (a checkpoint with more blocks restores into fewer without
// a missing tensor, so extra tensors count too).
std::vector<std::string> model_mismatches(train::Trainer& t, const checkpoint::Store::Loaded& c) {
  std::vector<std::string> out;
  auto f = c.files.find(train::kModelFile);
  if (f == c.files.end()) return {std::string("the checkpoint has no ") + train::kModelFile};
  std::map<std::string, std::vector<std::int64_t>> ckpt, model;
  for (const auto& e : f->second.entries()) ckpt[e.name] = e.shape;
  for (const auto& p : t.model().named_parameters()) model[p.key()] = p.value().sizes().vec();
  for (const auto& b : t.model().named_buffers()) model[b.key()] = b.value().sizes().vec();
  auto shape = [](const std::vector<std::int64_t>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (const auto& [name, sh] : model) {
    auto it = ckpt.find(name);
    if (it == ckpt.end())
      out.push_back(name + " is not in the checkpoint");
    else if (it->second != sh)
      out.push_back(name + " is " + shape(it->second) + " in the checkpoint, " + shape(sh) + " in the model");
  }
  for (const auto& [name, sh] : ckpt)
    if (!model.count(name)) out.push_back(name + " " + shape(sh) + " is in the checkpoint, not in the model");
  return out;
}

std::string join_first(const std::vector<std::string>& v, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < n; ++i) s += (i ? "; " : "") + v[i];
  if (v.size() > n) s += "; and " + std::to_string(v.size() - n) + " more";
  return s;
}

// The checkpoint directories Store::restore_newest passed over: for the
// report (paths may hold any byte; the reasons are valid UTF-8 already: as
// \xNN in JSON) and as "; <name>: <reason>" text for messages.
struct SkippedDirs {
  nlohmann::json json = nlohmann::json::array();
  std::string text;
};

SkippedDirs describe_skipped(const std::vector<checkpoint::Store::Skipped>& skipped_list) {
  SkippedDirs out;
  for (const auto& s : skipped_list) {
    out.json.push_back({{"dir", printable(s.dir)}, {"reason", s.reason}});
    out.text += "; " + printable(std::filesystem::path(s.dir).filename().string()) + ": " + s.reason;
  }
  return out;
}

// Refuses a checkpoint written by another run, with every reason at once: its
// tensors, then its config (the differences that refuse a start).
void refuse_misfit(train::Trainer& t, const checkpoint::Store::Loaded& loaded, const nlohmann::json& diffs) {
  const std::string name = std::filesystem::path(loaded.dir).filename().string();
  std::vector<std::string> misfit;
  if (auto mm = model_mismatches(t, loaded); !mm.empty())
    misfit.push_back("the model: " + std::to_string(mm.size()) + " tensor(s) differ: " + join_first(mm, 4));
  std::vector<std::string> refused;
  for (const auto& d : diffs)
    if (d["refused"].get<bool>())
      refused.push_back(d["key"].get<std::string>() + " is " + d["checkpoint"].dump() + " in the checkpoint, " +
                        d["config"].dump() + " here");
  if (!refused.empty()) misfit.push_back("the config it was written with: " + join_first(refused, 6));
  if (!misfit.empty())
    throw Error(ErrorKind::kConfig,
                "pilot.start_from latest: " + loaded.dir + " does not fit this run: " + join_first(misfit, 2),
                "the model, run.seed and data.format must be those of the run that wrote " + name +
                    " (its state.json holds that run's config; docs/pilot.md, \"Starting from a checkpoint\"); set "
                    "them back, or start from initialisation with an empty checkpoint.dir");
}

// The pilot saves step S+K (committed) and S+K+R (killed): never onto an existing directory.
void refuse_save_over(const WorkerContext& ctx, const checkpoint::Store::Loaded& loaded,
                      const std::vector<checkpoint::Store::Skipped>& skipped_list) {
  for (const std::int64_t s : {loaded.step + ctx.k, loaded.step + ctx.k + ctx.r}) {
    const std::string dir = ctx.ckpt_dir + "/" + checkpoint::step_dir_name(s);
    if (!std::filesystem::exists(dir)) continue;
    std::string why;
    for (const auto& sk : skipped_list)
      if (sk.dir == dir) why = " (it does not verify: " + sk.reason + ")";
    throw Error(ErrorKind::kConfig,
                "pilot.start_from latest: starting from step " + std::to_string(loaded.step) +
                    ", the pilot would save step " + std::to_string(s) + " into " + dir + ", which exists" + why,
                "the pilot never saves over a checkpoint directory: move " + dir +
                    " out of checkpoint.dir (`anchor "
                    "checkpoint verify " +
                    dir + "` shows what is wrong with it), or change pilot.steps_before_save");
  }
}

// Worker A's start from the newest committed checkpoint that verifies: chosen
// as worker B chooses (Store::restore_newest: newer directories that do not
// verify are passed over and listed with the reason), refused when it does not
// fit this run's model or config, or when the pilot's own saves would land on
// an existing directory; then restored (Trainer::restore: model, optimizer,
// loss scaler, RNG, step, at any world size). Returns the report's `start`;
// rank 0 also writes it to work/start.json as soon as the checkpoint is chosen,
// so a refused start is in the report too.
nlohmann::json restore_start(WorkerContext& ctx, train::Trainer& t) {
  checkpoint::Store store(ctx.ckpt_dir);
  std::vector<checkpoint::Store::Skipped> skipped_any;
  auto loaded = store.restore_newest(std::nullopt, &skipped_any);
  const auto& skipped_list = loaded ? loaded->skipped : skipped_any;
  const SkippedDirs skipped = describe_skipped(skipped_list);
  if (!loaded)
    throw Error(
        ErrorKind::kVerification,
        "pilot.start_from latest: no checkpoint in " + ctx.ckpt_dir + " is committed and verifies" + skipped.text,
        "`anchor checkpoint list " + ctx.ckpt_dir +
            "` shows every problem; put back a good copy of the "
            "checkpoint, or start from initialisation (pilot.start_from init) with an empty checkpoint.dir");
  // Every state.json field used here, type-checked (a bad one: exit 3 naming it), and every
  // file's format: a newer anchor's checkpoint is named as such, not as a misfit.
  const train::SavedState st = train::read_saved_state(loaded->state, loaded->dir + "/state.json");
  train::check_file_formats(*loaded);
  nlohmann::json start = {{"from", "latest"},
                          {"step", loaded->step},
                          {"dir", printable(loaded->dir)},
                          {"manifest_sha256", sha256_file(loaded->dir + "/manifest.json").sha256},
                          {"run_id", st.run_id},
                          {"world_size", st.world_size},
                          {"strategy", st.strategy},
                          {"config_digest_matches", st.config_digest == config::digest(ctx.cfg)},
                          {"skipped", skipped.json}};
  if (!skipped.json.empty())
    ANCHOR_LOG_WARN("pilot", "starting from {}: newer checkpoint directories do not verify and are passed over{}",
                    loaded->dir, skipped.text);
  const auto diffs =
      st.config.is_object() ? config_differences(st.config, config::to_json(ctx.cfg)) : nlohmann::json::array();
  start["config_differences"] = diffs;
  if (ctx.env.rank == 0) fs::atomic_write_file(protocol::work::start(ctx.run_dir), dump_json(start, 2));

  refuse_misfit(t, *loaded, diffs);
  for (const auto& d : diffs)
    ANCHOR_LOG_WARN("pilot", "{} differs from the checkpoint's config: {} there, {} here", d["key"].get<std::string>(),
                    d["checkpoint"].dump(), d["config"].dump());
  refuse_save_over(ctx, *loaded, skipped_list);
  const auto d = t.digest(t.restore(*loaded)).to_json();
  start["restored_state"] = {
      {"model", d["model"]}, {"optimizer", d["optimizer"]}, {"rng", d["rng"]}, {"step", d["step"]}};
  start["rng_restore"] = t.rng_restore();
  ANCHOR_LOG_INFO("pilot", "worker A starts from {} (step {}, saved by {} rank(s))", loaded->dir, loaded->step,
                  start["world_size"].get<int>());
  if (ctx.env.rank == 0) fs::atomic_write_file(protocol::work::start(ctx.run_dir), dump_json(start, 2));
  return start;
}

// Worker A's steps (run_reference), each appending its stage record to ctx.out.stages.

// Pin (rank 0), build the trainer, and place the start: initialisation or the
// newest committed checkpoint (restored).
std::unique_ptr<train::Trainer> load_stage(WorkerContext& ctx, bool use_hash_cache) {
  if (ctx.env.rank == 0) pin_stage(ctx, use_hash_cache);
  protocol::StageTimer load("load");
  StageMemory load_mem("cpu");
  auto tp = make_trainer(ctx);
  auto& t = *tp;
  const nlohmann::json start =
      ctx.cfg.pilot.start_from == "latest" ? restore_start(ctx, t) : nlohmann::json{{"from", "init"}};
  ctx.out.start = start;
  const auto& mc = ctx.cfg.model;
  ctx.out.model = {t.num_parameters(),     mc.n_layer,           mc.n_head,           mc.n_embd,
                   mc.vocab_size,          ctx.cfg.data.seq_len, t.flops_per_token(), mc.source,
                   t.model().flops_note(), t.model().attention()};
  ctx.out.stages.push_back(load.end({{"parameters", t.num_parameters()},
                                     {"attention", t.model().attention()},
                                     {"device", t.device()},
                                     {"train_windows", t.dataset().train().size()},
                                     {"val_windows", t.dataset().val().size()},
                                     {"threads", ctx.cfg.run.threads},
                                     {"start_from", start["from"]},
                                     {"start_step", t.step()},
                                     {"memory", load_mem.read_and_report("load")}}));
  ctx.out.loss_scaler_enabled = t.loss_scaler().enabled();
  return tp;
}

// Numerical validation of train.precision (docs/precision.md): step 0 in
// fp32 and in the chosen precision from the same state; the training
// trajectory is left as it was.
void precision_stage(WorkerContext& ctx, train::Trainer& t) {
  if (t.precision() == train::Precision::kFp32) return;
  const auto& p = ctx.cfg.pilot;
  protocol::StageTimer prec("precision");
  auto v = t.validate_precision(p.precision_tolerance);
  ctx.out.precision = v;
  if (ctx.env.rank == 0) fs::atomic_write_file(protocol::work::precision(ctx.run_dir), v.dump(2));
  const std::string verdict = v["verdict"].get<std::string>();
  if (verdict == "non_finite") {
    std::string names;
    for (const auto& n : v["non_finite"])
      names += (names.empty() ? "" : ", ") + n["what"].get<std::string>() + " " + n["tensor"].get<std::string>();
    throw Error(ErrorKind::kVerification, "precision: non-finite values: " + names,
                "see report.json precision.non_finite; lower the learning rate, check the data, or use fp32");
  }
  if (verdict == "flagged")
    ANCHOR_LOG_WARN("precision", "{} differs from fp32 beyond pilot.precision_tolerance {} (report.json precision)",
                    ctx.cfg.train.precision, p.precision_tolerance);
  ctx.out.stages.push_back(prec.end({{"precision", ctx.cfg.train.precision},
                                     {"verdict", verdict},
                                     {"loss_rel_diff", v["loss"]["rel_diff"]},
                                     {"grad_norm_rel_diff", v["grad_norm"]["rel_diff"]},
                                     {"max_param_rel_diff", v["parameters"]["max_rel_diff"]},
                                     {"flagged", v["parameters"]["flagged"].size()},
                                     {"tolerance", p.precision_tolerance}}));
}

// K steps; the last one is the measured step: full optimizer state exists
// (K >= 2), the peak is reset right before it (zero_grad, forward, backward,
// clip, optimizer step; item() synchronises).
void train_stage(WorkerContext& ctx, train::Trainer& t) {
  const std::string dev = t.device();
  protocol::StageTimer train("train");
  auto& steps = ctx.out.train_steps;
  const StepProgress at = progress(ctx, "A", t.step(), t.step() + ctx.k + ctx.r);
  steps = run_steps(t, static_cast<int>(ctx.k) - 1, at);
  StageMemory step_mem(dev);
  const train::StepRecord last = run_steps(t, 1, at).at(0);
  ctx.out.step_memory = step_mem.reading();
  ctx.out.step_memory.device_report = measure::device_smi_report(dev);
  protocol::emit(step_memory_line(last.step, dev, ctx.out.step_memory, t.state_bytes()));
  ctx.out.state_bytes = t.state_bytes();
  if (ctx.pg) ctx.out.sharding = t.sharding();  // this rank's state vs DDP's, after the measured step
  steps.push_back(last);
  const double step_s = last.compute_s + last.data_wait_s;
  ctx.out.matmul_flops = measure::measured_matmul_flops(dev);
  ctx.out.stages.push_back(train.end({{"steps", ctx.k},
                                      {"first_step", steps.front().step},
                                      {"measured_step", last.step},
                                      {"step_seconds", step_s},
                                      {"tokens_per_s", step_s > 0 ? static_cast<double>(last.tokens) / step_s : 0.0},
                                      {"world_size", ctx.env.world_size},
                                      {"comm_s", last.comm_s},
                                      {"memory", ctx.out.step_memory.to_json()}}));
}

double eval_stage(WorkerContext& ctx, train::Trainer& t) {
  const auto& p = ctx.cfg.pilot;
  protocol::StageTimer eval("eval");
  StageMemory eval_mem(t.device());
  const double eval_loss = finite_eval_loss(t.evaluate(p.eval_batches), "eval");
  ctx.out.eval_loss = eval_loss;
  protocol::emit(protocol::EvalLine{t.step(), {true, eval_loss}, "", std::nullopt});
  ctx.out.stages.push_back(eval.end({{"loss", eval_loss},
                                     {"perplexity", std::exp(eval_loss)},
                                     {"batches", p.eval_batches},
                                     {"memory", eval_mem.read_and_report("eval")}}));
  return eval_loss;
}

// The save of step K, committed; retention as the long run applies it.
void save_stage(WorkerContext& ctx, train::Trainer& t, checkpoint::Store& store, double eval_loss) {
  protocol::StageTimer save("checkpoint_save");
  StageMemory save_mem(t.device());
  // The run and its config travel in state.json: a later pilot starting from
  // this checkpoint names the run and compares the configs.
  double replica_check_s = 0;
  std::map<std::string, checkpoint::TensorDigests> written;
  const std::string step_dir = ctx.ckpt_dir + "/" + checkpoint::step_dir_name(t.step());
  protocol::emit(checkpoint_line("save", "begin", t.step(), printable(step_dir)));
  auto saved = save_checkpoint(ctx, t, store,
                               {{"eval_loss", eval_loss}, {"run_id", ctx.run_id}, {"config", config::to_json(ctx.cfg)}},
                               {}, &replica_check_s, &written);
  // The state as saved: the tensors this process wrote keep the digests the
  // save computed (each byte hashed once); the rest (another rank wrote the
  // model) is hashed here.
  ctx.out.saved_state = t.digest(t.known_digests(written));
  ctx.out.saved_step = t.step();
  auto end = checkpoint_line("save", "end", t.step(), printable(step_dir));
  if (saved) end.bytes = static_cast<std::int64_t>(saved->bytes), end.seconds = saved->seconds;
  protocol::emit(end);
  protocol::emit(digests_line("save", *ctx.out.saved_state));
  // Only after a newer commit, never the newest valid one.
  if (saved)
    // The new step counts as valid unread only when this process wrote and
    // hashed every byte of it: with several ranks the others' files were
    // checked here by size alone (on another node, nobody here read them).
    for (const auto& gone : store.apply_retention(ctx.cfg.checkpoint.keep_last, ctx.pg ? "" : saved->dir))
      ANCHOR_LOG_INFO("checkpoint", "retention removed {}", gone);
  auto save_fig = saved ? save_figures(*saved) : nlohmann::json{{"rank", ctx.env.rank}, {"writer", "rank 0"}};
  save_fig["memory"] = save_mem.read_and_report("checkpoint_save");
  if (ctx.pg) save_fig["replica_check_s"] = replica_check_s;
  ctx.out.stages.push_back(save.end(save_fig));
}

// The second save: the supervisor SIGKILLs us once the first file is on disk,
// leaving a torn checkpoint that the resume worker must skip.
[[noreturn]] void killed_save(WorkerContext& ctx, train::Trainer& t, checkpoint::Store& store) {
  protocol::emit(protocol::StageLine{"kill", "begin", "", std::nullopt});
  const std::string step_dir = printable(ctx.ckpt_dir + "/" + checkpoint::step_dir_name(t.step()));
  protocol::emit(checkpoint_line("save", "begin", t.step(), step_dir));
  auto hook = [&](std::string_view point) {
    if (point.rfind("after_file:", 0) == 0) {
      auto window = checkpoint_line("save", "kill_window", t.step(), step_dir);
      window.point = std::string(point);
      protocol::emit(window);
      for (;;) ::pause();  // until SIGKILL; PR_SET_PDEATHSIG ends us if the supervisor dies
    }
  };
  save_checkpoint(ctx, t, store, {}, hook);
  throw Error(ErrorKind::kRuntime, "the second save finished although the supervisor should have killed it");
}

// Worker A: load, K steps, eval, the save of K, R reference steps, then the
// save of K+R that the supervisor kills.
ExitCode run_reference(WorkerContext& ctx, bool use_hash_cache) {
  if (ctx.spec.start_latest != (ctx.cfg.pilot.start_from == "latest"))
    throw Error(ErrorKind::kRuntime, "the pilot spec's start_from is not the run's pilot.start_from",
                "the spec is written by the anchor that starts the worker; run the worker through that anchor");
  auto tp = load_stage(ctx, use_hash_cache);
  auto& t = *tp;
  write_stages_so_far(ctx, "reference");
  precision_stage(ctx, t);
  train_stage(ctx, t);
  write_stages_so_far(ctx, "reference");
  const double eval_loss = eval_stage(ctx, t);
  write_stages_so_far(ctx, "reference");
  checkpoint::Store store(ctx.ckpt_dir);
  diverge_replica_fault(ctx, t);
  save_stage(ctx, t, store, eval_loss);
  write_stages_so_far(ctx, "reference");

  protocol::StageTimer ref("reference");
  ctx.out.reference_steps =
      run_steps(t, static_cast<int>(ctx.r), progress(ctx, "A", t.step() - ctx.k, t.step() + ctx.r));
  ctx.out.final_state = t.digest();
  protocol::emit(digests_line("final", *ctx.out.final_state));
  ctx.out.stages.push_back(ref.end({{"steps", ctx.r}}));
  write_result(ctx, "reference");
  killed_save(ctx, t, store);
}

ExitCode run_probe(WorkerContext& ctx);
void resume_from_checkpoint(WorkerContext& ctx);

ExitCode run_resume(WorkerContext& ctx) {
  resume_from_checkpoint(ctx);
  if (ctx.pg) {
    // Rank 0 hosts the store: nobody leaves while another rank may still read it.
    ctx.pg->barrier("end of the resume worker");
    if (ctx.env.rank != 0) return ExitCode::kOk;
  }
  // The resumed run's trainer is gone: the probe (rank 0 only, one process,
  // no collectives) measures from an empty allocator, and saves the start-up
  // of a process of its own.
  ctx.out = protocol::WorkerResult{};
  return run_probe(ctx);
}

// The loss of a model on the export's check sequence (docs/models.md,
// "Export"): tokens (7919 i + 13) mod vocab_size, i < min(64, block_size),
// each predicting the next, in eval mode and fp32. Whoever loads the export
// elsewhere computes the same figure from the files.
double export_check_loss(model::Model& m, const config::ModelConfig& mc, const std::string& device) {
  const std::int64_t n = std::min(64, mc.block_size);
  auto ids = (torch::arange(n, torch::kLong) * 7919 + 13).remainder(mc.vocab_size).to(torch::Device(device));
  torch::NoGradGuard no_grad;
  m.eval();
  const double loss = m.loss(ids.slice(0, 0, n - 1).unsqueeze(0), ids.slice(0, 1, n).unsqueeze(0)).item<double>();
  m.train(true);
  return loss;
}

// The export copied off the node (export.copy_to; docs/models.md, "Copy off
// the node"): to <copy_to>/<run id>, every file fsynced, then read back there
// against its SHA-256 (fs::copy_verified). The plan times the long run's
// copies at this rate.
void copy_off_stage(WorkerContext& ctx, const model::HfExport& exported) {
  protocol::StageTimer stage("copy_off");
  std::vector<fs::KnownFile> files;
  for (const auto& f : exported.files) files.push_back({f.name, f.size, f.sha256, ""});
  const std::string to = ctx.copy_to + "/" + (ctx.run_id.empty() ? std::string("export") : ctx.run_id);
  const auto r = fs::copy_verified(ctx.run_dir + "/export", files, to);
  ctx.out.stages.push_back(
      stage.end({{"to", printable(to)},
                 {"files", files.size()},
                 {"bytes", r.bytes},
                 {"seconds", r.copy_s},
                 {"verify_s", r.verify_s},
                 {"verified", true},
                 {"gb_per_s", r.copy_s > 0 ? static_cast<double>(r.bytes) / r.copy_s / 1e9 : 0.0}}));
}

// The resumed run's final weights in Hugging Face's GPT-2 layout, in
// <run_dir>/export (export.hf; model/hf_export.hpp): the built-in GPT only.
void export_stage(WorkerContext& ctx, train::Trainer& t) {
  if (!ctx.cfg.exporting.hf) return;
  if (t.model().kind() != "builtin") {
    ANCHOR_LOG_INFO("export",
                    "not exported: a TorchScript module has no GPT-2 layout (export.hf applies to the built-in GPT)");
    return;
  }
  protocol::StageTimer stage("export");
  model::ModelCard card;
  card.run_id = ctx.run_id;
  card.step = t.step();
  card.data_format = ctx.cfg.data.format;
  card.anchor_version = build::kVersion;
  const auto files = model::export_gpt2_hf(t.model().named_parameters(), model::GptOptions::from(ctx.cfg.model),
                                           ctx.run_dir + "/export", card);
  const double seconds = stage.elapsed();
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files.files) list.push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}});
  const double loss = export_check_loss(t.model(), ctx.cfg.model, t.device());
  ctx.out.stages.push_back(
      stage.end({{"dir", "export"},
                 {"layout", "huggingface-gpt2"},
                 {"files", list},
                 {"bytes", files.bytes},
                 {"seconds", seconds},
                 {"gb_per_s", seconds > 0 ? static_cast<double>(files.bytes) / seconds / 1e9 : 0.0},
                 {"check_loss", loss},
                 {"step", t.step()}}));
  if (!ctx.copy_to.empty()) copy_off_stage(ctx, files);
}

train::StepRecord profiled_step(const WorkerContext& ctx, train::Trainer& t, nlohmann::json& figures);

// The restore's lines: each directory passed over (skip, with its problem), the
// restored one (end, with the bytes read and the read's seconds), its digests.
void report_restore(const checkpoint::Store::Loaded& loaded, std::uint64_t bytes, double read_s,
                    const train::StateDigest& restored) {
  for (const auto& s : loaded.skipped) {
    auto skip = checkpoint_line("restore", "skip", std::nullopt, printable(s.dir));
    skip.problems = {printable(s.reason)};
    protocol::emit(skip);
  }
  auto end = checkpoint_line("restore", "end", loaded.step, printable(loaded.dir));
  end.bytes = static_cast<std::int64_t>(bytes);
  end.seconds = read_s;
  protocol::emit(end);
  protocol::emit(digests_line("restore", restored));
}

// Worker B's steps from the restored checkpoint's step (its directory's, not
// the trainer's counter, which a faulty restore may leave wrong: the verdict
// names that) to the spec's stop_at: R, unless the newest step that verifies
// is another than worker A's save, which the verdict names too.
int resume_steps(const WorkerContext& ctx, const checkpoint::Store::Loaded& loaded) {
  if (loaded.step >= ctx.spec.stop_at || ctx.spec.stop_at - loaded.step > std::numeric_limits<int>::max())
    throw Error(ErrorKind::kVerification,
                "the newest checkpoint that verifies, " + printable(loaded.dir) + " (step " +
                    std::to_string(loaded.step) + "), is not a step before the spec's stop_at " +
                    std::to_string(ctx.spec.stop_at) + " that worker B can resume from",
                "`anchor checkpoint list " + printable(ctx.ckpt_dir) + "` shows the checkpoints and their problems");
  return static_cast<int>(ctx.spec.stop_at - loaded.step);
}

void resume_from_checkpoint(WorkerContext& ctx) {
  const auto& p = ctx.cfg.pilot;
  auto& stages = ctx.out.stages;

  // The stage's parts, timed apart: building the model (not restore work), reading and
  // verifying every file (SHA-256 against the manifest: the read path), loading the tensors
  // into the trainer, and the state digest the verdict compares.
  protocol::StageTimer restore("restore");
  auto tp = make_trainer(ctx);
  auto& t = *tp;
  const double build_s = restore.elapsed();
  StageMemory restore_mem(t.device());
  checkpoint::Store store(ctx.ckpt_dir);
  protocol::emit(checkpoint_line("restore", "begin", std::nullopt, printable(ctx.ckpt_dir)));
  auto loaded = store.restore_newest();
  if (!loaded) throw Error(ErrorKind::kVerification, "no committed checkpoint that verifies in " + ctx.ckpt_dir);
  const int steps = resume_steps(ctx, *loaded);
  const double read_s = restore.elapsed() - build_s;
  const auto& faults = ctx.faults;
  if (faults.any()) ANCHOR_LOG_WARN("restore", "fault injection active (ANCHOR_PILOT_FAULT): this run must fail");
  const train::KnownDigests known = t.restore(*loaded, faults);
  const double load_s = restore.elapsed() - build_s - read_s;
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : loaded->skipped) {
    ctx.out.skipped.push_back({printable(s.dir), s.reason});
    skipped.push_back(ctx.out.skipped.back().to_json());
  }
  ctx.out.restored_step = loaded->step;
  ctx.out.restored_dir = printable(loaded->dir);
  ctx.out.restored_seen = loaded->verified;
  ctx.out.restored_state = t.digest(known);  // the data digests the restore verified, reused
  ctx.out.rng_restore = t.rng_restore();
  const double digest_s = restore.elapsed() - build_s - read_s - load_s;
  std::uint64_t restored_bytes = 0;
  for (const auto& f : loaded->manifest.value("files", nlohmann::json::array()))
    restored_bytes += f.value("size", 0ull);
  report_restore(*loaded, restored_bytes, read_s, *ctx.out.restored_state);
  stages.push_back(restore.end({{"step", loaded->step},
                                {"dir", printable(loaded->dir)},
                                {"skipped", skipped},
                                {"bytes", restored_bytes},
                                {"seconds", read_s},
                                {"gb_per_s", read_s > 0 ? static_cast<double>(restored_bytes) / read_s / 1e9 : 0.0},
                                {"model_build_s", build_s},
                                {"load_state_s", load_s},
                                {"state_digest_s", digest_s},
                                {"memory", restore_mem.read_and_report("restore")}}));
  write_stages_so_far(ctx, "resume");

  protocol::StageTimer eval("eval_after_restore");
  const double eval_loss = finite_eval_loss(t.evaluate(p.eval_batches), "eval after the restore");
  ctx.out.eval_loss = eval_loss;
  protocol::emit(protocol::EvalLine{t.step(), {true, eval_loss}, "", std::nullopt});
  stages.push_back(eval.end({{"loss", eval_loss}, {"perplexity", std::exp(eval_loss)}}));
  write_stages_so_far(ctx, "resume");

  protocol::StageTimer resume("resume");
  nlohmann::json profile;
  StepFn profiled;  // rank 0's last step: the profile of a step (docs/report.md, "profile.json")
  if (ctx.env.rank == 0) profiled = [&](train::Trainer& tr) { return profiled_step(ctx, tr, profile); };
  ctx.out.resume_steps = run_steps(t, steps, progress(ctx, "B", t.step(), ctx.spec.stop_at), profiled);
  const double replica_check_s = check_replicas(ctx, t);  // the resumed replicas, at the end
  ctx.out.final_state = t.digest();
  protocol::emit(digests_line("final", *ctx.out.final_state));
  nlohmann::json resume_fig = {{"steps", ctx.out.resume_steps.size()}};
  if (!profile.is_null()) resume_fig["profile"] = profile;
  if (ctx.pg) resume_fig["replica_check_s"] = replica_check_s;
  stages.push_back(resume.end(resume_fig));
  if (ctx.env.rank == 0) export_stage(ctx, t);
  write_result(ctx, "resume");
}

// Worker B's last resumed step, run under LibTorch's profiler and written to
// <run_dir>/profile.json in the Chrome trace format (docs/report.md,
// "profile.json"): a real step at the configured shape, so the profile costs
// the pilot no step of its own. Where LibTorch has Kineto (PyPI's 2.x),
// Kineto's profiler: the operators and, on a GPU, the kernels they launch and
// the memory copies (CUPTI), on the device's own time line. Otherwise
// (Debian's 1.13 is built without it) anchor's operator recorder
// (op_recorder.hpp): the operators as the CPU side runs and launches them, as
// LibTorch's legacy profiler would list them, at a seventh of its cost per
// operator. The profiler changes no number the step computes (the verdict
// compares this step with worker A's); it is not the measured step, whose
// time and memory would hold the profiler's cost.
// The step runs exactly once whatever the profiler does: a profiler that
// cannot start leaves the step unprofiled, one that fails after it is a
// warning with the reason in the figures, never the pilot's failure; the
// step's own failure is the pilot's, as any step's.
struct Profiled {
  std::string text;  // the Chrome trace, compact: an array of events (the recorder) or {traceEvents: [...]} (Kineto)
  std::size_t events = 0;
  std::string profiler;
};

#if TORCH_VERSION_MAJOR >= 2
namespace prof = torch::autograd::profiler;
namespace prof_impl = torch::profiler::impl;

prof_impl::ProfilerConfig kineto_config() { return prof_impl::ProfilerConfig(prof_impl::ProfilerState::KINETO); }

std::set<prof_impl::ActivityType> kineto_activities(bool gpu) {
  std::set<prof_impl::ActivityType> a = {prof_impl::ActivityType::CPU};
  if (gpu) a.insert(prof_impl::ActivityType::CUDA);
  return a;
}

// Stops Kineto whatever else failed; false when stopping it failed too.
bool kineto_stop_quietly() {
  try {
    prof::disableProfiler();
    return true;
  } catch (...) {
    return false;
  }
}

// Starts Kineto; false with `why` when this LibTorch refuses it, and whatever
// it had started stopped again (never left on next to the recorder).
bool kineto_start(bool gpu, std::string& why) {
  try {
    prof::prepareProfiler(kineto_config(), kineto_activities(gpu));
    prof::enableProfiler(kineto_config(), kineto_activities(gpu));
    return true;
  } catch (const std::exception& e) {
    why = "Kineto refused: " + compat::message_of(e);
  } catch (...) {
    why = "Kineto refused with an exception that is not a std::exception";
  }
  kineto_stop_quietly();  // refused before it was on: this fails, quietly
  return false;
}

// Stops Kineto and reads back the trace it saves; throws when it saved none.
Profiled kineto_finish(bool gpu, const std::string& scratch) {
  std::error_code ec;
  std::filesystem::remove(scratch, ec);
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    result = prof::disableProfiler();
  } catch (...) {
    kineto_stop_quietly();  // never left on for the export and the probe
    throw;
  }
  result->save(scratch);
  if (!std::filesystem::exists(scratch, ec))
    throw Error(ErrorKind::kRuntime, "Kineto saved no trace (LibTorch built without it)");
  Profiled p;
  const auto trace = nlohmann::json::parse(fs::read_file(scratch));
  std::filesystem::remove(scratch, ec);
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw Error(ErrorKind::kRuntime, "Kineto's trace has no traceEvents list");
  for (const auto& e : trace["traceEvents"]) p.events += e.is_object() && e.value("ph", "") == "X";
  p.text = dump_json(trace) + "\n";  // a third of Kineto's indented text
  p.profiler = gpu ? "LibTorch Kineto profiler (operators, and the GPU kernels and copies they launch)"
                   : "LibTorch Kineto profiler (operators, CPU)";
  return p;
}
#endif

// What profiling a step came to: the step, its profile or why there is none,
// and how long it took.
struct ProfiledStep {
  train::StepRecord step;
  bool stepped = false;
  std::optional<Profiled> profile;
  std::string failed;  // why there is no profile, when the profiler failed
  double seconds = 0;  // the profiled step's (with the recorder, its start, stop and trace text too)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if TORCH_VERSION_MAJOR >= 2
// The step under Kineto; not stepped (and `no_kineto` says why) when Kineto
// does not start.
void kineto_profiled_step(train::Trainer& t, bool gpu, const std::string& scratch, std::string& no_kineto,
                          ProfiledStep& out) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!kineto_start(gpu, no_kineto)) return;
  try {
    out.step = t.train_step();  // it synchronises the device at its end: every kernel is in
    out.stepped = true;
    out.seconds = seconds_since(t0);
  } catch (...) {
    kineto_stop_quietly();  // the step's own error is the one that counts
    throw;
  }
  try {
    out.profile = kineto_finish(gpu, scratch);
  } catch (const std::exception& e) {
    out.failed = compat::message_of(e);  // no second step under the recorder: the step ran
  }
}
#endif

// The step under anchor's operator recorder (`refused`: the fault that keeps it from starting).
void recorded_step(train::Trainer& t, bool refuse, const std::string& refused, ProfiledStep& out) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<OpRecorder> recorder;
  try {
    if (refuse) throw Error(ErrorKind::kRuntime, refused);
    recorder.emplace();
  } catch (const std::exception& e) {
    out.failed = "the operator recorder refused: " + compat::message_of(e);
  }
  out.step = t.train_step();  // recorded when the recorder started; its error is the pilot's either way
  if (recorder) {
    try {
      auto trace = recorder->finish();
      out.profile = Profiled{std::move(trace.json) + "\n", trace.events,
                             "anchor's operator recorder (LibTorch's RecordFunction callbacks: operators, CPU side)"};
    } catch (const std::exception& e) {
      out.failed = compat::message_of(e);
    }
  }
  out.seconds = seconds_since(t0);
}

// Writes the profile to `file` and its figures; a failure is a warning and the figures' error.
void write_profile(const WorkerContext& ctx, const std::string& file, const ProfiledStep& ps,
                   const std::string& no_kineto, nlohmann::json& figures) {
  try {
    if (!ps.profile) throw Error(ErrorKind::kRuntime, ps.failed);
    const auto& p = ps.profile;
    fs::atomic_write_file(file, p->text);
    figures = {{"file", "profile.json"},          {"events", p->events},    {"seconds", ps.seconds},
               {"bytes", p->text.size()},         {"step", ps.step.step},   {"micro_batch", ctx.cfg.train.micro_batch},
               {"seq_len", ctx.cfg.data.seq_len}, {"profiler", p->profiler}};
    if (!no_kineto.empty()) figures["kineto"] = no_kineto;
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("profile", "no profile of a step: {}", compat::message_of(e));
    figures = {{"error", compat::message_of(e)}};
  }
}

// One step of `t` under the profiler; `figures` gets what the resume stage
// reports of it (docs/report.md, "profile.json").
train::StepRecord profiled_step(const WorkerContext& ctx, train::Trainer& t, nlohmann::json& figures) {
  const std::string file = ctx.run_dir + "/profile.json";
  std::error_code gone;
  std::filesystem::remove(file, gone);  // a reused run directory's is not this run's (the supervisor removed it too)
  // About 2,500 operator events per layer and micro-step (7k for the 2-layer
  // default at grad_accum 2, 29k for 6 layers): past ~500k the profile would
  // cost worker B hundreds of MB for a file no one opens whole.
  const std::int64_t micro_steps = static_cast<std::int64_t>(ctx.cfg.model.n_layer) * ctx.cfg.train.grad_accum;
  if (micro_steps > 200) {
    figures = {{"skipped", "model.n_layer x train.grad_accum is " + std::to_string(micro_steps) +
                               ": the profile of a step would exceed about 500,000 events"}};
    return t.train_step();
  }
  const bool gpu = t.device().rfind("cuda", 0) == 0;
  std::string no_kineto;
  ProfiledStep ps;
  // ANCHOR_PILOT_FAULT=profiler_refuses: no profiler starts; kineto_refuses:
  // Kineto does not, the recorder does (src/common/faults.cpp).
  const bool refuse = ctx.faults.profiler_refuses;
  const std::string refused = "refused by ANCHOR_PILOT_FAULT=profiler_refuses";
#if TORCH_VERSION_MAJOR >= 2
  bool kineto_refuses = false;
  for (const auto& f : faults::read("ANCHOR_PILOT_FAULT")) kineto_refuses |= f.point == "kineto_refuses";
  if (refuse) no_kineto = "Kineto " + refused;
  if (kineto_refuses && !refuse) no_kineto = "Kineto refused by ANCHOR_PILOT_FAULT=kineto_refuses";
  if (!refuse && !kineto_refuses) kineto_profiled_step(t, gpu, ctx.run_dir + "/profile.kineto.tmp", no_kineto, ps);
#else
  (void)gpu;
  no_kineto = "LibTorch " TORCH_VERSION " is built without Kineto";  // Debian's: no step is spent finding out
#endif
  if (!ps.stepped) recorded_step(t, refuse, refused, ps);
  write_profile(ctx, file, ps, no_kineto, figures);
  return ps.step;
}

// The memory probe: the step's peak at a quarter of the micro-batch and at
// half the sequence (plan::probe_shapes), each a step with full optimizer
// state (one trainer, its AdamW state created without a step), with the
// configured gradient accumulation. With worker A's measured step (the
// configured shape, measured the same way: a step with full optimizer state,
// the peak reset right before it) these points let the plan separate the fixed
// state from per-token activations; the supervisor puts that step first.
// Several ranks: worker A's step also held DDP's buffers, so the probe
// measures the configured shape in a process of its own too. Runs in the
// resume worker after its results are written and its trainer destroyed, so
// it never touches the reference or the resumed run.
ExitCode run_probe(WorkerContext& ctx) {
  const int mb = ctx.cfg.train.micro_batch, T = ctx.cfg.data.seq_len;
  std::vector<std::pair<std::int64_t, std::int64_t>> points;
  if (ctx.env.world_size > 1) points.push_back({mb, T});
  for (const auto& shape : plan::probe_shapes(mb, T, ctx.cfg.pilot.memory_probe_micro_batch)) points.push_back(shape);
  protocol::StageTimer probe("memory_probe");
  std::vector<protocol::MemoryPoint> out;
  double build_s = 0, state_s = 0;  // what the points' steps cost on top, for the report
  if (!points.empty()) {
    // One trainer for every point, its AdamW state created as a first step
    // would create it, without the step: every measured step is then what a
    // fresh trainer's second step is (full optimizer state, the previous
    // step's activations and gradients freed), whatever shape the step before
    // it had (tests/unit/measure/test_memory.cpp checks it byte for byte).
    // grad_accum as configured: from the second micro-step on, accumulated
    // gradients are alive next to the activations and count in the peak.
    train::Trainer t(ctx.cfg);
    build_s = probe.elapsed();
    t.create_optimizer_state();
    state_s = probe.elapsed() - build_s;
    // A step the loss scaler skips (fp16: inf gradients at the initial scale)
    // runs no optimizer update, whose temporaries may be the peak: such a
    // point is measured again. Bounded: a scaler that skips this many steps in
    // a row is a failing run.
    constexpr int kMaxSkippedSteps = 64;
    for (const auto& [pmb, pT] : points) {
      t.set_step_shape(static_cast<int>(pmb), static_cast<int>(pT));
      train::StepRecord r;
      protocol::MemoryReading mem;
      for (int i = 0; i == 0 || r.skipped; ++i) {
        if (i == kMaxSkippedSteps)
          throw Error(ErrorKind::kVerification,
                      "memory probe: " + std::to_string(kMaxSkippedSteps) +
                          " steps in a row were skipped by the loss scaler; no optimizer update to measure",
                      "check train.loss_scale (docs/precision.md): every step overflowing is a failing run");
        measure::release_cached(t.device());  // a GPU: the reserved peak is this step's pool, not the last one's
        StageMemory m(t.device());
        r = t.train_step();
        mem = m.reading();
      }
      out.push_back({pmb, pT, mem.tensors.peak_allocated_bytes, mem.tensors.peak_reserved_bytes, t.state_bytes(),
                     "probe", r.compute_s + r.data_wait_s});
    }
  }
  ctx.out.memory_points = out;
  ctx.out.stages.push_back(
      probe.end({{"points", out.size()}, {"model_build_s", build_s}, {"optimizer_state_s", state_s}}));
  if (ctx.cfg.train.activation_checkpointing > 0) {
    protocol::StageTimer ac("activation_ckpt");
    ctx.out.activation_checkpointing = measure_activation_checkpointing(ctx.cfg);
    ctx.out.stages.push_back(ac.end(ctx.out.activation_checkpointing));
  }
  write_result(ctx, "probe");
  return ExitCode::kOk;
}

// The worker's first line: who it is and the libraries it runs (docs/program.md, "The contract").
protocol::Hello hello(protocol::Role role, int world_size) {
  protocol::Hello h;
  h.role = protocol::role_name(role);
  h.world_size = world_size;
  const auto v = manifest::runtime_versions();
  auto known = [&](const char* key) {
    const std::string s = v.value(key, std::string("none"));
    return s == "none" ? std::string() : s;
  };
  h.versions = {known("libtorch"), known("cuda_runtime"), known("cudnn"), known("nccl"), ""};
  h.anchor = std::string(build::kVersion) + "+" + build::kGitCommit;
  h.executable = proc::self_exe();
  h.pid = ::getpid();
  return h;
}

// A worker started early (kReleaseEnv) waits here, having read nothing, until
// the supervisor releases it with "go" on its stdin; anything else stops it.
void wait_for_release() {
  const char* how = std::getenv(protocol::kReleaseEnv);
  if (!how || std::string(how) != "stdin") return;
  const auto line = proc::read_line(STDIN_FILENO);
  if (!line || *line != "go")
    throw Error(ErrorKind::kRuntime,
                "the worker was started to wait for its release, and its stdin " +
                    (line ? "said '" + printable(*line) + "'" : std::string("closed")) + " instead of go",
                "anchor pilot starts and releases its workers; run `anchor pilot CONFIG`");
}

// The worker's task once it is told it: the process group (several ranks), then worker A or B.
ExitCode run_task(WorkerContext& ctx, const WorkerOptions& opts) {
  bind_threads(ctx.cfg.run.threads, ctx.cfg.run.deterministic);
  std::filesystem::create_directories(protocol::work::dir(ctx.run_dir));
  protocol::emit(hello(ctx.spec.role, ctx.env.world_size));
  if (ctx.env.distributed()) {
    // One process per device: this rank's GPU, then the backend that reduces there (docs/distributed.md).
    ctx.device = dist::rank_device(ctx.cfg.device, ctx.env, static_cast<int>(torch::cuda::device_count()));
    const bool on_gpu = ctx.device.rfind("cuda", 0) == 0;
    const std::string backend =
        dist::choose_backend(ctx.cfg.distributed.backend, on_gpu, dist::nccl_available(), TORCH_VERSION);
    if (dist::dist_fault().at(dist::DistFault::Point::kRendezvous, ctx.env.rank)) {
      ANCHOR_LOG_WARN("dist", "ANCHOR_DIST_FAULT: rank {} kills itself before the rendezvous", ctx.env.rank);
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
    ctx.pg = std::make_unique<dist::ProcessGroup>(ctx.env, ctx.cfg.distributed.timeout_s, backend);
  }
  // The reference worker never returns normally (SIGKILL in its kill window).
  if (ctx.spec.role == protocol::Role::kReference) return run_reference(ctx, opts.use_hash_cache);
  return run_resume(ctx);
}

}  // namespace

ExitCode run_worker(const WorkerOptions& opts) {
  // Before any tensor exists, so every allocation of the run is counted.
  measure::install_counting_allocator();
  // The supervisor starts each rank of a worker with RANK/WORLD_SIZE/...
  // (docs/distributed.md); rank 0 speaks for the group.
  const dist::LaunchEnv env = dist::detect_launch();
  if (env.distributed()) protocol::set_events_enabled(env.rank == 0);
  try {
    wait_for_release();
    WorkerContext ctx = load_context();
    ctx.env = env;
    return run_task(ctx, opts);
  } catch (const std::exception& e) {
    // The supervisor puts this in the report; main() still prints it on stderr.
    std::string message = compat::message_of(e), hint;
    if (const auto* ce = dynamic_cast<const config::ConfigError*>(&e))
      for (const auto& pr : ce->problems()) message += "; " + pr.format();
    if (const auto* ae = dynamic_cast<const Error*>(&e)) hint = ae->hint();
    protocol::emit(protocol::ErrorLine{message, "", hint});
    throw;
  }
}

}  // namespace anchor::worker
