// A pilot worker: a fresh process the supervisor starts from its own binary.
//
// Reference worker (A): load, train K steps, eval, save + commit step K, go on
// R steps as the reference, then begin a second save and wait to be SIGKILLed
// in the middle of it. Resume worker (B): restore the newest committed
// checkpoint (skipping the torn one), eval, resume R steps.
// Each writes work/<role>.json; the supervisor compares them.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/measure/proc.hpp"
#include "anchor/pipeline/pilot.hpp"
#include "anchor/train/trainer.hpp"
#include "events.hpp"

namespace anchor::pipeline {
namespace {

struct WorkerContext {
  config::Config cfg;
  std::string run_dir;
  std::string ckpt_dir;
  nlohmann::json out = nlohmann::json::object();  // becomes work/<role>.json
};

WorkerContext load_context(const WorkerOptions& opts) {
  WorkerContext ctx;
  ctx.run_dir = opts.run_dir;
  auto doc = nlohmann::json::parse(fs::read_file(opts.run_dir + "/config.json"));
  ctx.cfg = config::from_json(doc.at("config"));
  ctx.cfg.base_dir = doc.at("base_dir").get<std::string>();
  ctx.ckpt_dir = ctx.cfg.checkpoint.dir.empty() ? opts.run_dir + "/checkpoints"
                                                : config::resolve_path(ctx.cfg, ctx.cfg.checkpoint.dir);
  ctx.out["stages"] = nlohmann::json::array();
  return ctx;
}

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

nlohmann::json run_steps(train::Trainer& t, int n) {
  nlohmann::json steps = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    auto r = t.train_step();
    ANCHOR_LOG_INFO("train_step", "step={} loss={:.4f} grad_norm={:.4f} lr={:.3e} ({:.3f}s)", r.step, r.loss,
                    r.grad_norm, r.lr, r.compute_s + r.data_wait_s);
    steps.push_back(r.to_json());
  }
  return steps;
}

nlohmann::json save_figures(const checkpoint::SaveResult& s) {
  return {{"dir", s.dir}, {"bytes", s.bytes}, {"seconds", s.seconds},
          {"gb_per_s", s.seconds > 0 ? static_cast<double>(s.bytes) / s.seconds / 1e9 : 0.0}};
}

void write_result(const WorkerContext& ctx, const std::string& role) {
  auto mem = measure::read_proc_memory();
  nlohmann::json out = ctx.out;
  out["role"] = role;
  out["pid"] = ::getpid();
  out["memory"] = {{"rss_bytes", mem.rss_bytes}, {"peak_rss_bytes", mem.hwm_bytes}};
  fs::atomic_write_file(ctx.run_dir + "/work/" + role + ".json", out.dump(2));
}

int run_reference(WorkerContext& ctx) {
  const auto& p = ctx.cfg.pilot;
  auto& stages = ctx.out["stages"];

  StageTimer load("load");
  train::Trainer t(ctx.cfg);
  stages.push_back(load.end({{"parameters", t.num_parameters()},
                             {"train_windows", t.dataset().train().size()},
                             {"val_windows", t.dataset().val().size()},
                             {"threads", ctx.cfg.run.threads}}));

  StageTimer train("train");
  ctx.out["train_steps"] = run_steps(t, p.steps_before_save);
  const auto& last = ctx.out["train_steps"].back();
  const double step_s = last["compute_s"].get<double>() + last["data_wait_s"].get<double>();
  stages.push_back(train.end({{"steps", p.steps_before_save},
                              {"measured_step", last["step"]},
                              {"step_seconds", step_s},
                              {"tokens_per_s", step_s > 0 ? last["tokens"].get<double>() / step_s : 0.0}}));

  StageTimer eval("eval");
  const double eval_loss = t.evaluate(p.eval_batches);
  ctx.out["eval_loss"] = eval_loss;
  stages.push_back(eval.end({{"loss", eval_loss}, {"perplexity", std::exp(eval_loss)}, {"batches", p.eval_batches}}));

  StageTimer save("checkpoint_save");
  checkpoint::Store store(ctx.ckpt_dir);
  std::vector<torch::Tensor> keep;
  ctx.out["saved_state"] = t.state_digest();
  auto saved = store.save(t.save_request(keep, {{"eval_loss", eval_loss}}));
  keep.clear();
  ctx.out["saved_step"] = t.step();
  stages.push_back(save.end(save_figures(saved)));

  StageTimer ref("reference");
  ctx.out["reference_steps"] = run_steps(t, p.steps_after_resume);
  ctx.out["final_state"] = t.state_digest();
  stages.push_back(ref.end({{"steps", p.steps_after_resume}}));
  write_result(ctx, "reference");

  // The second save: the supervisor SIGKILLs us once the first file is on disk,
  // leaving a torn checkpoint that the resume worker must skip.
  emit_event({{"stage", "kill"}, {"event", "start"}, {"time", utc_now()}});
  auto hook = [](std::string_view point) {
    if (point.rfind("after_file:", 0) == 0) {
      emit_event({{"stage", "kill"}, {"event", "kill_window"}, {"point", std::string(point)}, {"time", utc_now()}});
      for (;;) ::pause();  // until SIGKILL; PR_SET_PDEATHSIG ends us if the supervisor dies
    }
  };
  store.save(t.save_request(keep, {}), hook);
  throw Error(ErrorKind::kRuntime, "the second save finished although the supervisor should have killed it");
}

int run_resume(WorkerContext& ctx) {
  const auto& p = ctx.cfg.pilot;
  auto& stages = ctx.out["stages"];

  StageTimer restore("restore");
  train::Trainer t(ctx.cfg);
  checkpoint::Store store(ctx.ckpt_dir);
  auto loaded = store.restore_newest();
  if (!loaded)
    throw Error(ErrorKind::kVerification, "no committed checkpoint that verifies in " + ctx.ckpt_dir);
  const auto faults = train::RestoreFaults::from_env();
  if (faults.any()) ANCHOR_LOG_WARN("restore", "fault injection active (ANCHOR_PILOT_FAULT): this run must fail");
  t.restore(*loaded, faults);
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : loaded->skipped) skipped.push_back({{"dir", s.dir}, {"reason", s.reason}});
  ctx.out["restored_step"] = loaded->step;
  ctx.out["restored_dir"] = loaded->dir;
  ctx.out["skipped"] = skipped;
  ctx.out["restored_state"] = t.state_digest();
  stages.push_back(restore.end({{"step", loaded->step}, {"dir", loaded->dir}, {"skipped", skipped}}));

  StageTimer eval("eval_after_restore");
  const double eval_loss = t.evaluate(p.eval_batches);
  ctx.out["eval_loss"] = eval_loss;
  stages.push_back(eval.end({{"loss", eval_loss}, {"perplexity", std::exp(eval_loss)}}));

  StageTimer resume("resume");
  ctx.out["resume_steps"] = run_steps(t, p.steps_after_resume);
  ctx.out["final_state"] = t.state_digest();
  stages.push_back(resume.end({{"steps", p.steps_after_resume}}));
  write_result(ctx, "resume");
  return 0;
}

}  // namespace

int run_worker(const WorkerOptions& opts) {
  WorkerContext ctx = load_context(opts);
  std::filesystem::create_directories(opts.run_dir + "/work");
  if (opts.role == WorkerRole::kReference) return run_reference(ctx);
  return run_resume(ctx);
}

}  // namespace anchor::pipeline
