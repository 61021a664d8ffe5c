// report.json's reader and writer (run_report.hpp): one list of fields per
// struct, `fields`, walked by json_doc's Reader (JSON -> struct) and Writer
// (struct -> JSON), so the two cannot disagree on a key.
#include "anchor/run_report/run_report.hpp"

namespace anchor::run_report {

// Each struct's fields, in the struct's namespace: json_doc finds them by
// argument-dependent lookup.

template <class V>
void fields(V& v, StageMemory& s) {
  v("peak_allocated_bytes", s.peak_allocated_bytes);
  v("peak_reserved_bytes", s.peak_reserved_bytes);
  v("peak_rss_bytes", s.peak_rss_bytes);
}

template <class V>
void fields(V& v, ProfileOp& s) {
  v("name", s.name);
  v("device", s.device);
  v("self_s", s.self_s);
  v("total_s", s.total_s);
  v("calls", s.calls);
}

template <class V>
void fields(V& v, Profile& s) {
  v("file", s.file);
  v("profiler", s.profiler);
  v("skipped", s.skipped);
  v("error", s.error);
  v("events", s.events);
  v("micro_batch", s.micro_batch);
  v("seq_len", s.seq_len);
  v("step", s.step);
  v("seconds", s.seconds);
  v("self_s", s.self_s);
  v("top", s.top);
}

template <class V>
void fields(V& v, StageFigures& s) {
  v("precision", s.precision);
  v("verdict", s.verdict);
  v("mode", s.mode);
  v("attention", s.attention);
  v("start_from", s.start_from);
  v("finding", s.finding);
  v("why", s.why);
  v("max_relative", s.max_relative);
  v("loss_rel_diff", s.loss_rel_diff);
  v("grad_norm_rel_diff", s.grad_norm_rel_diff);
  v("loss", s.loss);
  v("tokens_per_s", s.tokens_per_s);
  v("seconds", s.seconds);
  v("memory_saved_percent", s.memory_saved_percent);
  v("time_added_percent", s.time_added_percent);
  v("gb_per_s", s.gb_per_s);
  v("model_build_s", s.model_build_s);
  v("load_state_s", s.load_state_s);
  v("state_digest_s", s.state_digest_s);
  v("train_windows", s.train_windows);
  v("bytes", s.bytes);
  v("step", s.step);
  v("parameters", s.parameters);
  v("start_step", s.start_step);
  v("memory_saved_bytes", s.memory_saved_bytes);
  v("torn_checkpoints", s.torn_checkpoints);
  v("skipped", s.skipped);
  v("memory", s.memory);
  v("profile", s.profile);
}

template <class V>
void fields(V& v, Stage& s) {
  v("stage", s.stage);
  v("status", s.status);
  v("error", s.error);
  v("seconds", s.seconds);
  v("figures", s.figures);
}

template <class V>
void fields(V& v, StepRow& s) {
  v("step", s.step);
  v("loss", s.loss);
  v("grad_norm", s.grad_norm);
  v("lr", s.lr);
  v("loss_scale", s.loss_scale);
  v("data_wait_s", s.data_wait_s);
  v("compute_s", s.compute_s);
  v("comm_s", s.comm_s);
  v("batch_digest", s.batch_digest);
}

template <class V>
void fields(V& v, Steps& s) {
  v("train", s.train);
  v("reference", s.reference);
  v("resume", s.resume);
  v("resumed", s.resumed);
  v("numbered_from", s.numbered_from);
}

template <class V>
void fields(V& v, Eval& s) {
  v("before_save", s.before_save);
  v("after_restore", s.after_restore);
  v("perplexity", s.perplexity);
}

template <class V>
void fields(V& v, Check& s) {
  v("name", s.name);
  v("detail", s.detail);
  v("component", s.component);
  v("ok", s.ok);
}

template <class V>
void fields(V& v, RankVerdict& s) {
  v("rank", s.rank);
  v("verdict", s.verdict);
  v("cause", s.cause);
}

template <class V>
void fields(V& v, StateDigestGroups& s) {
  v("model", s.model);
  v("optimizer", s.optimizer);
  v("rng", s.rng);
  v("scaler", s.scaler);
}

template <class V>
void fields(V& v, Resume& s) {
  v("verdict", s.verdict);
  v("mode", s.mode);
  v("state_digest_scheme", s.state_digest_scheme);
  v("tolerance", s.tolerance);
  v("cause", s.cause);
  v("diverged", s.diverged);
  v("checks", s.checks);
  v("per_rank", s.per_rank);
  v("saved_step", s.saved_step);
  v("restored_step", s.restored_step);
  v("last_step", s.last_step);
  v("state_digests", s.state_digests);
}

template <class V>
void fields(V& v, SkippedScalerStep& s) {
  v("part", s.part);
  v("nonfinite_grad", s.nonfinite_grad);
  v("step", s.step);
  v("loss_scale", s.loss_scale);
}

template <class V>
void fields(V& v, LossScaler& s) {
  v("enabled", s.enabled);
  v("saved_scale", s.saved_scale);
  v("restored_scale", s.restored_scale);
  v("final_scale", s.final_scale);
  v("skipped_steps", s.skipped_steps);
}

template <class V>
void fields(V& v, PrecisionFigure& s) {
  v("fp32", s.fp32);
  v("value", s.value);
  v("rel_diff", s.rel_diff);
  v("flagged", s.flagged);
}

template <class V>
void fields(V& v, PrecisionParameter& s) {
  v("name", s.name);
  v("grad_norm_fp32", s.grad_norm_fp32);
  v("grad_norm", s.grad_norm);
  v("rel_diff", s.rel_diff);
  v("rel_error", s.rel_error);
}

template <class V>
void fields(V& v, PrecisionParameters& s) {
  v("flagged", s.flagged);
  v("largest", s.largest);
}

template <class V>
void fields(V& v, NonFinite& s) {
  v("what", s.what);
  v("tensor", s.tensor);
}

template <class V>
void fields(V& v, Precision& s) {
  v("precision", s.precision);
  v("reference", s.reference);
  v("verdict", s.verdict);
  v("step", s.step);
  v("tolerance", s.tolerance);
  v("non_finite", s.non_finite);
  v("loss", s.loss);
  v("grad_norm", s.grad_norm);
  v("parameters", s.parameters);
}

template <class V>
void fields(V& v, RngRestore& s) {
  v("saved_world_size", s.saved_world_size);
  v("world_size", s.world_size);
  v("rederived", s.rederived);
}

template <class V>
void fields(V& v, RankFigures& s) {
  v("rank", s.rank);
  v("node", s.node);
  v("optimizer_bytes", s.optimizer_bytes);
  v("optimizer_bytes_ddp", s.optimizer_bytes_ddp);
  v("gradient_bytes", s.gradient_bytes);
  v("gradient_bytes_ddp", s.gradient_bytes_ddp);
  v("host", s.host);
  v("comm_s", s.comm_s);
}

template <class V>
void fields(V& v, Distributed& s) {
  v("strategy", s.strategy);
  v("backend", s.backend);
  v("world_size", s.world_size);
  v("nodes", s.nodes);
  v("per_rank", s.per_rank);
  v("rng_restore", s.rng_restore);
}

template <class V>
void fields(V& v, SkippedCheckpoint& s) {
  v("dir", s.dir);
  v("reason", s.reason);
}

template <class V>
void fields(V& v, ConfigDifference& s) {
  v("key", s.key);
  v("checkpoint", s.checkpoint);
  v("config", s.config);
  v("refused", s.refused);
}

template <class V>
void fields(V& v, Start& s) {
  v("from", s.from);
  v("dir", s.dir);
  v("manifest_sha256", s.manifest_sha256);
  v("run_id", s.run_id);
  v("strategy", s.strategy);
  v("step", s.step);
  v("world_size", s.world_size);
  v("skipped", s.skipped);
  v("config_differences", s.config_differences);
  v("rng_restore", s.rng_restore);
}

template <class V>
void fields(V& v, MeasuredStep& s) {
  v("seconds", s.seconds);
  v("compute_s", s.compute_s);
  v("data_wait_s", s.data_wait_s);
  v("stall_percent", s.stall_percent);
  v("comm_s", s.comm_s);
  v("tokens_per_s", s.tokens_per_s);
  v("tokens_per_s_all_ranks", s.tokens_per_s_all_ranks);
  v("mfu_estimate", s.mfu_estimate);
  v("world_size", s.world_size);
  v("micro_batch", s.micro_batch);
  v("grad_accum", s.grad_accum);
  v("tokens", s.tokens);
}

template <class V>
void fields(V& v, StepMemory& s) {
  v("peak_allocated_bytes", s.peak_allocated_bytes);
  v("peak_reserved_bytes", s.peak_reserved_bytes);
  v("peak_rss_bytes", s.peak_rss_bytes);
}

template <class V>
void fields(V& v, StateBytes& s) {
  v("parameters", s.parameters);
  v("gradients", s.gradients);
  v("optimizer", s.optimizer);
}

template <class V>
void fields(V& v, MemoryPointFigures& s) {
  v("micro_batch", s.micro_batch);
  v("seq_len", s.seq_len);
  v("peak_allocated_bytes", s.peak_allocated_bytes);
}

template <class V>
void fields(V& v, MemoryFigures& s) {
  v("source", s.source);
  v("precision", s.precision);
  v("device_total_bytes", s.device_total_bytes);
  v("baseline_bytes", s.baseline_bytes);
  v("step", s.step);
  v("state_bytes", s.state_bytes);
  v("stages", s.stages);
  v("points", s.points);
}

template <class V>
void fields(V& v, ModelFigures& s) {
  v("parameters", s.parameters);
  v("n_layer", s.n_layer);
  v("n_head", s.n_head);
  v("n_embd", s.n_embd);
  v("vocab_size", s.vocab_size);
  v("seq_len", s.seq_len);
  v("micro_batch", s.micro_batch);
  v("grad_accum", s.grad_accum);
  v("flops_per_token", s.flops_per_token);
  v("flops_source", s.flops_source);
  v("device", s.device);
}

template <class V>
void fields(V& v, IoFigures& s) {
  v("bytes", s.bytes);
  v("seconds", s.seconds);
  v("gb_per_s", s.gb_per_s);
  v("model_build_s", s.model_build_s);
  v("load_state_s", s.load_state_s);
  v("state_digest_s", s.state_digest_s);
}

template <class V>
void fields(V& v, ActivationCheckpointing& s) {
  v("trade", s.trade);
}

template <class V>
void fields(V& v, Measurements& s) {
  v("model", s.model);
  v("step", s.step);
  v("memory", s.memory);
  v("checkpoint_save", s.checkpoint_save);
  v("restore", s.restore);
  v("activation_checkpointing", s.activation_checkpointing);
}

template <class V>
void fields(V& v, NodeRate& s) {
  v("path", s.path);
  v("what", s.what);
  v("kind", s.kind);
  v("skipped", s.skipped);
  v("bytes", s.bytes);
  v("seconds", s.seconds);
  v("mb_per_s", s.mb_per_s);
  v("bytes_per_token", s.bytes_per_token);
  v("tokens_per_s", s.tokens_per_s);
  v("files", s.files);
}

template <class V>
void fields(V& v, AllReduceSize& s) {
  v("bytes", s.bytes);
  v("seconds", s.seconds);
  v("algbw_gb_per_s", s.algbw_gb_per_s);
  v("busbw_gb_per_s", s.busbw_gb_per_s);
}

template <class V>
void fields(V& v, AllReduceFigures& s) {
  v("backend", s.backend);
  v("what", s.what);
  v("kind", s.kind);
  v("skipped", s.skipped);
  v("ranks", s.ranks);
  v("latency_us", s.latency_us);
  v("busbw_gb_per_s", s.busbw_gb_per_s);
  v("sizes", s.sizes);
}

template <class V>
void fields(V& v, GpuHealth& s) {
  v("skipped", s.skipped);
  v("driver", s.driver);
  v("xid_read", s.xid_read);
  v("kind", s.kind);
  v("not_used", s.not_used);
  v("failures", s.failures);
  v("warnings", s.warnings);
  v("xid", s.xid);
  v("devices", s.devices);
}

template <class V>
void fields(V& v, Node& s) {
  v("host", s.host);
  v("checkpoint_dir", s.checkpoint_dir);
  v("data", s.data);
  v("all_reduce", s.all_reduce);
  v("gpu_health", s.gpu_health);
}

template <class V>
void fields(V& v, PipelineCommand& s) {
  v("command", s.command);
  v("seconds", s.seconds);
  v("bytes", s.bytes);
  v("mb_per_s", s.mb_per_s);
  v("log", s.log);
  v("what", s.what);
  v("kind", s.kind);
}

template <class V>
void fields(V& v, PipelineFigures& s) {
  v("download", s.download);
  v("preprocess", s.preprocess);
}

template <class V>
void fields(V& v, CheckpointEntry& s) {
  v("dir", s.dir);
  v("manifest_sha256", s.manifest_sha256);
  v("step", s.step);
}

template <class V>
void fields(V& v, DriftRow& s) {
  v("what", s.what);
  v("old", s.old_value);
  v("new", s.new_value);
}

template <class V>
void fields(V& v, Reproduces& s) {
  v("report", s.report);
  v("drift", s.drift);
}

template <class V>
void fields(V& v, Reproduction& s) {
  v("verdict", s.verdict);
  v("mode", s.mode);
  v("tolerance", s.tolerance);
  v("differences", s.differences);
  v("checks", s.checks);
}

template <class V>
void fields(V& v, OsRelease& s) {
  v("pretty_name", s.pretty_name);
}

template <class V>
void fields(V& v, Dependencies& s) {
  v("libtorch", s.libtorch);
  v("cuda_runtime", s.cuda_runtime);
  v("cuda_driver", s.cuda_driver);
  v("cudnn", s.cudnn);
  v("nccl", s.nccl);
  v("hip_runtime", s.hip_runtime);
  v("glibc", s.glibc);
  v("os", s.os);
}

template <class V>
void fields(V& v, DeviceEntry& s) {
  v("name", s.name);
}

template <class V>
void fields(V& v, DeviceFacts& s) {
  v("accelerator", s.accelerator);
  v("count", s.count);
  v("devices", s.devices);
}

template <class V>
void fields(V& v, HostFacts& s) {
  v("hostname", s.hostname);
  v("cpu_model", s.cpu_model);
  v("cpu_count", s.cpu_count);
  v("memory_total_bytes", s.memory_total_bytes);
}

template <class V>
void fields(V& v, BlasFacts& s) {
  v("library", s.library);
  v("threads", s.threads);
}

template <class V>
void fields(V& v, ThreadFacts& s) {
  v("run_threads", s.run_threads);
  v("intra_op", s.intra_op);
  v("inter_op", s.inter_op);
  v("blas", s.blas);
}

template <class V>
void fields(V& v, ContainerFacts& s) {
  v("digest", s.digest);
}

template <class V>
void fields(V& v, Manifest& s) {
  v("dependencies", s.dependencies);
  v("device", s.device);
  v("host", s.host);
  v("threads", s.threads);
  v("container", s.container);
}

template <class V>
void fields(V& v, ProgramVersions& s) {
  v("torch", s.torch);
}

template <class V>
void fields(V& v, Program& s) {
  v("command", s.command);
  v("versions", s.versions);
}

template <class V>
void fields(V& v, AnchorBuild& s) {
  v("version", s.version);
  v("git_commit", s.git_commit);
}

template <class V>
void fields(V& v, RunReport& s) {
  v("format", s.format);
  v("run_id", s.run_id);
  v("created_at", s.created_at);
  v("finished_at", s.finished_at);
  v("config_path", s.config_path);
  v("config_digest", s.config_digest);
  v("device", s.device);
  v("status", s.status);
  v("message", s.message);
  v("signer_key_id", s.signer_key_id);
  v("unsigned_reason", s.unsigned_reason);
  v("manifest_sha256", s.manifest_sha256);
  v("exit_code", s.exit_code);
  v("signed", s.is_signed);
  v("anchor", s.anchor);
  v("config", s.config);
  v("manifest", s.manifest);
  v("plan", s.plan);
  v("program", s.program);
  v("unverified_checkpoints", s.unverified_checkpoints);
  v("stages", s.stages);
  v("start", s.start);
  v("resume", s.resume);
  v("steps", s.steps);
  v("eval", s.eval);
  v("loss_scaler", s.loss_scaler);
  v("precision", s.precision);
  v("distributed", s.distributed);
  v("node", s.node);
  v("pipeline", s.pipeline);
  v("measurements", s.measurements);
  v("checkpoints", s.checkpoints);
  v("reproduces", s.reproduces);
  v("reproduction", s.reproduction);
}

RunReport RunReport::from_json(const Json& j) { return json_doc::read<RunReport>(j); }

std::int64_t step_number_offset(const RunReport& r) {
  const auto& steps = or_empty(r.steps);
  return 1 - steps.numbered_from.value_or(r.program ? 1 : 0);
}

Json RunReport::to_json() const { return json_doc::write(*this); }

template <class Section>
Json section_to_json(const Section& section) {
  return json_doc::write(section);
}
template Json section_to_json(const Reproduction&);
template Json section_to_json(const Manifest&);
template Json section_to_json(const StageMemory&);
template Json section_to_json(const IoFigures&);
template Json section_to_json(const Stage&);
template Json section_to_json(const Profile&);

template <class Section>
Section section_from_json(const Json& j) {
  return json_doc::read<Section>(j);
}
template Stage section_from_json(const Json&);

}  // namespace anchor::run_report
