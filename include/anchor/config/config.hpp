#pragma once
// The run configuration: one YAML file, parsed strictly into plain structs.
//
// Every key is documented in docs/config.md. Precedence:
//   built-in defaults < the YAML file < --set key=value overrides.
// Parsing collects *every* problem (unknown keys, wrong types, out-of-range
// values, missing required keys, contradictions) and throws one ConfigError
// listing them all, each with file:line:column; exit code 2.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/error.hpp"

namespace anchor::config {

struct RunConfig {
  std::string name = "pilot";
  std::string output_dir = "runs";  // run directories go under it: <output_dir>/<run-id>/
  std::uint64_t seed = 1234;        // root seed; every other seed derives from it
  bool deterministic = true;        // deterministic algorithms; bitwise resume on CPU
  int threads = 2;                  // intra-op threads; recorded (results depend on it)
};

struct ModelConfig {
  std::string source = "builtin";  // builtin | safetensors | torchscript
  std::string arch = "gpt";        // built-in family
  int n_layer = 2;
  int n_head = 4;
  int n_embd = 64;
  int vocab_size = 256;
  int block_size = 64;  // maximum positions (>= data.seq_len)
  double dropout = 0.1;
  bool bias = true;
  std::string attention = "auto";  // auto | sdpa | manual (built-in GPT; docs/models.md)
  std::string weights;             // source=safetensors: HF GPT-2 layout file
  std::string torchscript;         // source=torchscript: module file
};

struct DataConfig {
  std::string format = "text";     // text (bytes, vocab 256) | llmc (uint16 token shards)
  std::vector<std::string> train;  // files or globs (required)
  std::vector<std::string> val;    // files or globs; empty -> split off val_fraction
  double val_fraction = 0.1;       // used when val is empty
  int seq_len = 64;
};

struct OptimizerConfig {
  std::string name = "adamw";
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global grad norm; 0 disables
};

struct ScheduleConfig {
  std::string kind = "cosine";  // cosine | constant
  std::int64_t warmup_steps = 100;
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio
};

struct LossScaleConfig {
  std::string enabled = "auto";  // auto (fp16 only) | true | false
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

struct TrainConfig {
  int micro_batch = 4;            // sequences per micro-step per rank
  int grad_accum = 1;             // micro-steps per optimizer step
  std::int64_t global_batch = 0;  // sequences per step across ranks; 0 -> derived
  std::int64_t total_steps = 0;   // the full run's length (one of steps/tokens)
  std::int64_t total_tokens = 0;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::string precision = "fp32";    // fp32 | bf16 | fp16
  int activation_checkpointing = 0;  // 0 = none; N = every N blocks
  LossScaleConfig loss_scale;
};

struct PilotConfig {
  int steps_before_save = 2;   // K (>= 2: the measured step has full optimizer state)
  int steps_after_resume = 2;  // R
  int eval_batches = 2;
  double tolerance = 0.0;             // relative tolerance when bitwise is not expected (GPU)
  double precision_tolerance = 0.05;  // fp32 vs low-precision relative difference flagged above it
  int memory_probe_micro_batch = 0;   // second micro-batch for the memory fit; 0 -> micro_batch/4 (plan::probe_shapes)
  std::string start_from = "init";    // init | latest: worker A starts from the newest committed checkpoint
  int resume_world_size = 0;          // a program's worker B at this many ranks (DCP reshards); 0: nproc_per_node
  std::string shared_rng = "fail";    // fail | warn: a program's ranks that share a random stream they draw from
  std::string determinism = "auto";   // auto | check | off: a program's resumed steps run twice (the control)
  int preflight_mib = 64;             // the preflight stage's write and read size; 0: no preflight stage
};

struct DistributedConfig {
  int nproc_per_node = 1;
  std::string backend = "auto";  // auto | gloo | nccl
  std::string strategy = "ddp";  // ddp | zero1 | zero2
  double timeout_s = 300;
  double bucket_mb = 25;
};

struct CheckpointConfig {
  std::string dir;    // empty -> <run dir>/checkpoints
  int keep_last = 3;  // retention; never deletes the newest valid one
};

struct ReportConfig {
  std::string signing_key;  // PKCS#8 PEM private key; empty: the per-user key; "none": unsigned
  std::string public_key;   // optional SPKI PEM, for verify
};

// YAML section `export` (Config::exporting: `export` is a C++ keyword).
struct ExportConfig {
  bool hf = true;       // the built-in GPT's final weights in GPT-2's layout, <run dir>/export
  std::string copy_to;  // a directory off the node: the export copied to <copy_to>/<run id>, verified
};

struct ContainerConfig {
  std::string digest;     // sha256:<64 hex>; or ANCHOR_CONTAINER_DIGEST
  bool required = false;  // fail the pin when no digest is known
};

struct BudgetConfig {
  std::string catalog;               // empty -> configs/catalog.yaml shipped with anchor
  std::vector<std::string> devices;  // catalog names to plan for; empty -> all
  double headroom = 0.1;             // fraction of device memory kept free
  double failures_per_day = 0.5;     // expected interruptions per node-day (Young/Daly)
  double restart_minutes = 10;
  double download_gb = 0;
  double preprocess_hours = 0;
  double export_gb = 0;
  double egress_gbps = 1.0;
  double ingress_gbps = 1.0;
  double eval_every_steps = 0;  // 0 -> no periodic eval in the long run
  int nodes = 1;
  int gpus_per_node = 8;
  double margin = 0.2;  // schedule margin on top of the estimate
  // The GPU count search (docs/plan.md, "How many GPUs"): the run must end
  // within deadline_days; the knee is where scaling efficiency falls below
  // min_scaling_efficiency.
  double deadline_days = 30;
  double min_scaling_efficiency = 0.8;
  bool search_gpu_count = true;  // false: plan exactly nodes x gpus_per_node
  // The pipeline's commands, timed on a sample by the pilot (docs/plan.md,
  // "Download and preprocess"); empty: download and preprocess stay ASSUMED.
  std::vector<std::string> download_command;    // argv: fetches a sample into {out}
  std::vector<std::string> preprocess_command;  // argv: reads {in}, writes {out}
  std::string preprocess_sample;                // {in}; empty: the download's sample
  double pipeline_timeout_s = 3600;
};

// The user's own training program as the pilot's worker (issue 15;
// docs/program.md). Empty command: the built-in trainer.
struct ProgramConfig {
  std::vector<std::string> command;  // argv, started once per rank as worker A and worker B
  std::string cwd;                   // working directory; empty -> the config file's directory
  std::vector<std::string> env;      // NAME=VALUE added to (or replacing in) its environment
  double timeout_s = 3600;           // a worker running longer is killed and the pilot fails
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  PilotConfig pilot;
  std::string device = "cpu";  // cpu | cuda | cuda:N | rocm | auto
  DistributedConfig distributed;
  CheckpointConfig checkpoint;
  ReportConfig report;
  ExportConfig exporting;  // `export`
  ContainerConfig container;
  BudgetConfig budget;
  ProgramConfig program;

  // Where it came from; not part of to_json/digest (the same effective config
  // loaded from two places has one digest).
  std::string source_path;  // the YAML file as given to load() ("" otherwise)
  std::string base_dir;     // absolute; relative input paths resolve against it
};

// One problem found while loading: where it is and what is wrong.
// A problem in a --set override has file "--set" and line 0; a problem with
// no position in the file (a missing key, a contradiction between defaults)
// has line 0 too.
struct Problem {
  std::string file;
  int line = 0;  // 1-based; 0 when unknown (e.g. a --set override)
  int column = 0;
  std::string key;      // dotted path, e.g. "train.micro_batch"
  std::string message;  // what is wrong and what is allowed
  // "file:line:col: key: message"; "file: key: message" when line is 0;
  // the key part is left out when key is empty (a YAML syntax error).
  std::string format() const;
};

// kind() is ErrorKind::kConfig (exit code 2); what() is
// "config <file> has N problems"; hint() points at docs/config.md.
class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<Problem> problems);  // file: the first problem's
  ConfigError(const std::string& file, std::vector<Problem> problems);
  const std::vector<Problem>& problems() const { return problems_; }

 private:
  std::vector<Problem> problems_;
};

// Loads a config. `overrides` are "dotted.key=value" strings (value parsed as
// YAML scalar or flow sequence; an empty value empties a string or list key).
// Throws ConfigError listing every problem; Error (kIo) naming the path when
// the file cannot be read. Does not touch any other file: data globs, weights
// and keys are checked by the commands that use them (anchor pin).
// Sets source_path to `path` and base_dir to its directory (absolute).
Config load(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from text; `name` is used in problems. base_dir is `base_dir`, or
// the current directory when empty; source_path stays empty.
Config load_string(const std::string& yaml, const std::string& name = "<string>",
                   const std::vector<std::string>& overrides = {}, const std::string& base_dir = "");

// The effective config as JSON (every key, defaults filled in) and as YAML.
// to_json is canonical: the same config always gives the same bytes from dump().
nlohmann::json to_json(const Config& c);
std::string to_yaml(const Config& c);
// Re-creates a Config from to_json's output (used by reproduce and the workers),
// validating it exactly as load() does (ConfigError, file "<json>"). base_dir
// is what relative paths resolve against (the original config's directory);
// empty: the current directory. source_path stays empty.
Config from_json(const nlohmann::json& j, const std::string& base_dir = "");
// SHA-256 hex over to_json(c).dump(): the config digest in manifests and checkpoints.
std::string digest(const Config& c);

// Resolves a path from the config (data globs, model.weights,
// model.torchscript, report keys, budget.catalog, checkpoint.dir) against
// base_dir; absolute paths and "" are returned unchanged. Lexical only:
// touches no file. run.output_dir is relative to the current directory
// instead and is not passed through this.
std::string resolve_path(const Config& c, const std::string& p);

// Every setting whose value is a path relative to the config file's directory
// (data.train, data.val, model.init_from, ...; docs/config.md), each element of
// a list one entry: references into `c`, valid while `c` lives. What a
// reproduction's path map rewrites and a bundle places; from the schema, so a
// new path setting is in it.
std::vector<std::string*> config_relative_paths(Config& c);

// Every key `--set` accepts ("train.micro_batch", ...), in the schema's
// order: what shell completion offers after --set.
std::vector<std::string> setting_keys();

// The edit distance the "did you mean" suggestions use (an unknown key, an
// unknown command): Levenshtein plus adjacent transpositions.
std::size_t edit_distance(const std::string& a, const std::string& b);

// Seeds derived from the root seed, one per purpose (init, data, dropout, ...),
// so that changing one use never shifts another. Defined as the first 8 bytes,
// read little-endian, of SHA-256(root as 8 little-endian bytes || purpose),
// so any language can recompute it (docs/config.md has a Python one-liner).
std::uint64_t derive_seed(std::uint64_t root, const std::string& purpose);

// The purpose a rank's dropout (and every other draw from its default
// generators) is seeded from: each process its own stream, derived from
// (run.seed, rank). Rank 0's is "dropout", so a one-process run is rank 0 of
// a larger one; rank r > 0's is "dropout/rank<r>".
std::string dropout_purpose(int rank);

}  // namespace anchor::config
