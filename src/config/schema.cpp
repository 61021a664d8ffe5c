#include "config/schema.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <cstdio>
#include <regex>
#include <sstream>

#include "anchor/common/sha256.hpp"

namespace anchor::config::schema {
namespace {

// "key", function returning a reference to the member of the same name. The
// key is spelled once: the YAML path is the member path.
#define ANCHOR_KEY(path) #path, +[](Config & c) -> decltype((c.path)) { return c.path; }

std::string check_run_name(const std::string& s) {
  static const std::regex kName("[A-Za-z0-9_][A-Za-z0-9._-]{0,63}");
  // Length first: libstdc++'s regex recurses per character (found by fuzz_config).
  if (s.size() <= 64 && std::regex_match(s, kName)) return "";
  return "'" + s +
         "' is not a usable run name: expected 1-64 characters of A-Z a-z 0-9 . _ - "
         "not starting with '.' or '-' (it becomes part of a directory name)";
}

std::string check_non_empty(const std::string& s) { return s.empty() ? "must not be empty" : ""; }

std::string check_device(const std::string& s) {
  if (s == "cpu" || s == "cuda" || s == "rocm" || s == "auto") return "";
  static const std::regex kIndexed("cuda:(0|[1-9][0-9]{0,3})");
  if (s.size() <= 9 && std::regex_match(s, kIndexed)) return "";
  return "'" + s + "' is not a device; allowed: cpu, cuda, cuda:N (N = device index), rocm, auto";
}

std::string check_container_digest(const std::string& s) {
  if (s.empty()) return "";
  const std::string prefix = "sha256:";
  if (s.compare(0, prefix.size(), prefix) != 0)
    return "'" + s +
           "' is not an image digest: expected 'sha256:' followed by 64 lowercase "
           "hex characters (as `docker inspect --format '{{.Id}}'` prints), or empty";
  std::string hex = s.substr(prefix.size());
  if (is_sha256_hex(hex)) return "";
  if (hex.size() != 64)
    return "'" + s + "' has " + std::to_string(hex.size()) + " hex characters after 'sha256:', expected 64";
  return "'" + s +
         "' is not an image digest: the 64 characters after 'sha256:' must be "
         "lowercase hex (0-9a-f)";
}

std::vector<Field> make_fields() {  // NOLINT(readability-function-size): the schema's data table
  // clang-format off
  return {
    // run ------------------------------------------------------------------
    Field(ANCHOR_KEY(run.name), "Name of the run; part of each run directory's name.",
          "pilot (#3), report (#5)").checked(check_run_name, "1-64 of A-Z a-z 0-9 . _ -"),
    Field(ANCHOR_KEY(run.output_dir), "Directory under which each run gets its own directory `<output_dir>/<run-id>/`.",
          "pilot (#3)").checked(check_non_empty, "non-empty").cwd_relative(),
    Field(ANCHOR_KEY(run.seed), "Root seed. Every seed the run uses (init, data order, dropout) is derived from it with derive_seed(root, purpose).",
          "pin (#2), pilot (#3)"),
    Field(ANCHOR_KEY(run.deterministic), "Use deterministic algorithms; needed for bitwise resume.",
          "pilot (#3), multi-process (#7)"),
    Field(ANCHOR_KEY(run.threads), "Threads of every pool a built-in worker runs: LibTorch's intra-op and inter-op pools and the BLAS library's own (OpenBLAS with pthreads). With run.deterministic, a worker on MKL also asks for its reproducible sums (MKL_CBWR=AUTO unless MKL_CBWR is set). Each pool's idle threads sleep soon (GOMP_SPINCOUNT=10000, OPENBLAS_THREAD_TIMEOUT=4 unless set; docs/pilot.md). Recorded in the manifest (threads): results can depend on it.",
          "pilot (#3), measure (#6)").at_least(1).at_most(1024),

    // model ----------------------------------------------------------------
    Field(ANCHOR_KEY(model.source), "Where the model comes from: the built-in architecture initialised from run.seed (builtin), the built-in architecture with weights from model.weights (safetensors), or a TorchScript module (torchscript).",
          "pilot (#3), users' models (#8)").one_of({"builtin", "safetensors", "torchscript"}),
    Field(ANCHOR_KEY(model.arch), "Built-in architecture family: a GPT-2 style decoder.",
          "pilot (#3)").one_of({"gpt"}),
    Field(ANCHOR_KEY(model.n_layer), "Transformer blocks.", "pilot (#3), plan (#6)").at_least(1),
    Field(ANCHOR_KEY(model.n_head), "Attention heads per block; must divide model.n_embd.",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(model.n_embd), "Embedding width; a multiple of model.n_head.",
          "pilot (#3), plan (#6)").at_least(1),
    Field(ANCHOR_KEY(model.vocab_size), "Vocabulary size; 256 with data.format text (one token per byte), at most 65536 with llmc (uint16 tokens).",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(model.block_size), "Maximum positions; must be >= data.seq_len.",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(model.dropout), "Dropout probability (its masks come from the derived dropout seed).",
          "pilot (#3)").at_least(0).below(1),
    Field(ANCHOR_KEY(model.bias), "Biases in linear layers and layer norms (GPT-2 has them).",
          "pilot (#3)"),
    Field(ANCHOR_KEY(model.attention), "Causal self-attention of the built-in GPT: sdpa (torch's scaled_dot_product_attention: flash or memory-efficient kernels on a GPU; LibTorch 2.x only), manual (written out: matmul, -inf mask, softmax, dropout; the same on every LibTorch), auto (sdpa where this build's LibTorch has it, else manual). The report records which ran.",
          "LibTorch 2.x (#13)").one_of({"auto", "sdpa", "manual"}),
    Field(ANCHOR_KEY(model.weights), "source=safetensors: weights file in the Hugging Face GPT-2 layout. Pinned by SHA-256.",
          "pin (#2), pilot (#3)").config_relative(),
    Field(ANCHOR_KEY(model.torchscript), "source=torchscript: a TorchScript module whose forward(inputs, targets) returns the mean loss as a 0-dim tensor (contract and a Python example: docs/models.md). Pinned by SHA-256.",
          "pin (#2), users' models (#8)").config_relative(),

    // data -----------------------------------------------------------------
    Field(ANCHOR_KEY(data.format), "text: raw bytes, one token per byte (vocab 256); llmc: llm.c token shards (uint16 tokens).",
          "pilot (#3)").one_of({"text", "llmc"}),
    Field(ANCHOR_KEY(data.train), "Training files or glob patterns. Not expanded by the loader: anchor pin expands them and fails on one that matches nothing. Required unless program.command is set (a program reads its own data; files listed are pinned by digest).",
          "pin (#2), pilot (#3)").is_required().config_relative(),
    Field(ANCHOR_KEY(data.val), "Validation files or globs; empty: data.val_fraction of the training data is split off.",
          "pin (#2), pilot (#3)").config_relative(),
    Field(ANCHOR_KEY(data.val_fraction), "Fraction of the training data held out for validation when data.val is empty.",
          "pilot (#3)").at_least(0).below(1),
    Field(ANCHOR_KEY(data.seq_len), "Tokens per sequence; the pilot trains at the run's real length.",
          "pilot (#3), plan (#6)").at_least(1),

    // train ----------------------------------------------------------------
    Field(ANCHOR_KEY(train.micro_batch), "Sequences per micro-step per rank.",
          "pilot (#3), plan (#6)").at_least(1),
    Field(ANCHOR_KEY(train.grad_accum), "Micro-steps per optimizer step.",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(train.global_batch), "Sequences per optimizer step across all ranks; 0: derived. When set it must equal micro_batch * grad_accum * distributed.nproc_per_node.",
          "pilot (#3), plan (#6)").at_least(0),
    Field(ANCHOR_KEY(train.total_steps), "Length of the full (long) run in optimizer steps; 0: not given. Set at most one of total_steps and total_tokens.",
          "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(train.total_tokens), "Length of the full run in tokens; 0: not given. Set at most one of total_steps and total_tokens.",
          "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(train.optimizer.name), "Optimizer (decoupled weight decay Adam).",
          "pilot (#3)").one_of({"adamw"}),
    Field(ANCHOR_KEY(train.optimizer.lr), "Peak learning rate.", "pilot (#3)").above(0).at_most(10),
    Field(ANCHOR_KEY(train.optimizer.beta1), "Adam beta1.", "pilot (#3)").at_least(0).below(1),
    Field(ANCHOR_KEY(train.optimizer.beta2), "Adam beta2.", "pilot (#3)").at_least(0).below(1),
    Field(ANCHOR_KEY(train.optimizer.eps), "Adam epsilon.", "pilot (#3)").above(0),
    Field(ANCHOR_KEY(train.optimizer.weight_decay), "Decoupled weight decay.", "pilot (#3)").at_least(0),
    Field(ANCHOR_KEY(train.optimizer.grad_clip), "Maximum global gradient norm; 0 disables clipping.",
          "pilot (#3)").at_least(0),
    Field(ANCHOR_KEY(train.schedule.kind), "Learning-rate schedule after warmup: cosine decay to lr * min_lr_ratio over the full run, or constant.",
          "pilot (#3)").one_of({"cosine", "constant"}),
    Field(ANCHOR_KEY(train.schedule.warmup_steps), "Linear warmup steps; must not exceed train.total_steps when that is set.",
          "pilot (#3)").at_least(0),
    Field(ANCHOR_KEY(train.schedule.min_lr_ratio), "Final learning rate as a fraction of lr (cosine).",
          "pilot (#3)").at_least(0).at_most(1),
    Field(ANCHOR_KEY(train.precision), "Compute precision: fp32, bf16 autocast (fp32 master weights), fp16 autocast with loss scaling (GPU only).",
          "precision (#8), plan (#6)").one_of({"fp32", "bf16", "fp16"}),
    Field(ANCHOR_KEY(train.activation_checkpointing), "0: none; N: recompute every N-th block of the built-in GPT in backward (same gradients, less memory; the pilot measures both sides, docs/pilot.md). 0 with model.source torchscript.",
          "activation checkpointing (#8)").at_least(0),
    Field(ANCHOR_KEY(train.loss_scale.enabled), "Dynamic loss scaling: auto (on for fp16 only), true (on at any precision, e.g. to exercise it on CPU), false.",
          "precision (#8)").one_of({"auto", "true", "false"}),
    Field(ANCHOR_KEY(train.loss_scale.init_scale), "Loss scaler (docs/precision.md): initial loss scale.", "precision (#8)").above(0),
    Field(ANCHOR_KEY(train.loss_scale.growth_factor), "Loss scaler: scale multiplier after growth_interval consecutive clean steps.",
          "precision (#8)").at_least(1),
    Field(ANCHOR_KEY(train.loss_scale.backoff_factor), "Loss scaler: scale multiplier after a step with inf/NaN gradients (the step is skipped).",
          "precision (#8)").above(0).below(1),
    Field(ANCHOR_KEY(train.loss_scale.growth_interval), "Loss scaler: consecutive clean steps before the scale grows.",
          "precision (#8)").at_least(1),

    // pilot ----------------------------------------------------------------
    Field(ANCHOR_KEY(pilot.steps_before_save), "K: steps trained before the checkpoint is saved; at least 2 because step 2 is the first with full optimizer state.",
          "pilot (#3)").at_least(2)
          .because("step 2 is the first with full optimizer state, so the measured step and the checkpoint need K >= 2"),
    Field(ANCHOR_KEY(pilot.steps_after_resume), "R: steps run after the checkpoint, as reference and again after resume.",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(pilot.eval_batches), "Batches per eval (before save and after restore).",
          "pilot (#3)").at_least(1),
    Field(ANCHOR_KEY(pilot.tolerance), "Relative tolerance for resume equality when bitwise equality is not expected (nondeterministic GPU kernels); 0: bitwise.",
          "pilot (#3), multi-process (#7)").at_least(0),
    Field(ANCHOR_KEY(pilot.precision_tolerance), "Relative difference between fp32 and the chosen precision above which the report flags a value.",
          "precision (#8)").at_least(0),
    Field(ANCHOR_KEY(pilot.memory_probe_micro_batch), "Second, smaller micro-batch measured for the memory model; 0: micro_batch / 4 (at least 1).",
          "measure and plan (#6)").at_least(0),
    Field(ANCHOR_KEY(pilot.start_from), "Where worker A starts: init (the model initialised from run.seed; checkpoint.dir must hold no step directory) or latest (restored from the newest committed checkpoint in checkpoint.dir, which must exist, verify and fit the config; docs/pilot.md). `anchor pilot --start-from`.",
          "pilot restart (#7)").one_of({"init", "latest"}),

    Field(ANCHOR_KEY(pilot.resume_world_size), "Ranks of a program pilot's resumed run (worker B); 0: distributed.nproc_per_node. Another count resumes the program's checkpoint at that world size (DCP reshards on load) and compares the full restored state (docs/program.md, \"Resuming at another world size\").",
          "program pilot (#41)").at_least(0),
    Field(ANCHOR_KEY(pilot.shared_rng), "A program pilot whose ranks start with the same random stream and draw from it (each rank's dropout masks the same; seed document 003): fail (the pilot fails, exit 3) or warn (said in the log and the report).",
          "program pilot (#42)").one_of({"fail", "warn"}),
    Field(ANCHOR_KEY(pilot.determinism), "The determinism control of a program pilot: worker B's steps run a second time from the same save, which tells a program that does not repeat itself (nondeterministic kernels) from a resume bug (docs/program.md, \"Nondeterminism or a resume bug?\"). auto: only when the resume does not match (a pilot that passes pays nothing); check: always, the run-to-run difference reported; off: never.",
          "program pilot (#42)").one_of({"auto", "check", "off"}),
    Field(ANCHOR_KEY(pilot.preflight_mib), "MiB the pilot's first stage, the preflight, writes to checkpoint.dir (fsynced) and reads of data.train; it also all-reduces over the pilot's ranks and reads a GPU node's health, and a node that fails it is named before the pilot trains (docs/pilot.md, \"Preflight\"). 0: no preflight stage.",
          "preflight (#44)").at_least(0),

    // device ---------------------------------------------------------------
    Field(ANCHOR_KEY(device), "Device: cpu, cuda (the rank's local device), cuda:N, rocm (HIP builds expose it as cuda), auto (a GPU when present, else cpu).",
          "pilot (#3), measure (#6)").checked(check_device, "cpu, cuda, cuda:N, rocm, auto"),

    // distributed ----------------------------------------------------------
    Field(ANCHOR_KEY(distributed.nproc_per_node), "Processes (ranks) per node.",
          "multi-process (#7), plan (#6)").at_least(1),
    Field(ANCHOR_KEY(distributed.backend), "Collective backend: auto (nccl on GPU, gloo on CPU), gloo, nccl (RCCL under ROCm).",
          "multi-process (#7)").one_of({"auto", "gloo", "nccl"}),
    Field(ANCHOR_KEY(distributed.strategy), "Data parallelism: ddp (replicated state), zero1 (optimizer state sharded), zero2 (optimizer state and gradients sharded).",
          "multi-process (#7), plan (#6)").one_of({"ddp", "zero1", "zero2"}),
    Field(ANCHOR_KEY(distributed.timeout_s), "Timeout of every collective, in seconds.",
          "multi-process (#7)").above(0),
    Field(ANCHOR_KEY(distributed.bucket_mb), "Gradient all-reduce bucket size, in MB.",
          "multi-process (#7)").above(0),

    // checkpoint -----------------------------------------------------------
    Field(ANCHOR_KEY(checkpoint.dir), "Checkpoint directory; empty: `<run dir>/checkpoints`.",
          "checkpoints (#3, #4)").config_relative(),
    Field(ANCHOR_KEY(checkpoint.keep_last), "Committed checkpoints kept; the newest valid one is never deleted.",
          "checkpoints (#4)").at_least(1),

    // report ---------------------------------------------------------------
    Field(ANCHOR_KEY(report.signing_key), "PKCS#8 PEM private key that signs the report; empty: your per-user key, "
          "`$XDG_CONFIG_HOME/anchor/anchor.key` (else `~/.config/anchor/anchor.key`), made on first use; `none`: "
          "the report is written unsigned (and says so).",
          "report (#5)").config_relative(),
    Field(ANCHOR_KEY(report.public_key), "SPKI PEM public key, for verify.",
          "report (#5)").config_relative(),

    // export (Config::exporting: `export` is a C++ keyword) ---------------
    Field("export.hf", +[](Config& c) -> decltype((c.exporting.hf)) { return c.exporting.hf; },
          "After the resume, write the built-in GPT's final weights in Hugging Face's GPT-2 layout to "
          "`<run dir>/export` (`model.safetensors`, `config.json`; `transformers` loads it, anchor reads it back "
          "as `model.weights`), a measured and signed stage. A TorchScript model or a program is not exported.",
          "export (#19)"),
    Field("export.copy_to", +[](Config& c) -> decltype((c.exporting.copy_to)) { return c.exporting.copy_to; },
          "A directory off the node (a mounted share, a bucket's mount): after the export, a measured `copy_off` "
          "stage copies it to `<copy_to>/<run id>`, fsynced, and reads every file back there against its SHA-256; "
          "the plan then times copying off the node at the measured rate. It must exist (an unmounted share is "
          "refused, never filled). Empty: no copy. Not used by `anchor reproduce`.",
          "export (#19)").config_relative(),

    // container ------------------------------------------------------------
    Field(ANCHOR_KEY(container.digest), "Container image digest; empty: taken from `ANCHOR_CONTAINER_DIGEST` when set, else from the runtime where it exposes one (Podman's `/run/.containerenv` in a container run with `--privileged`: docs/manifest.md).",
          "pin (#2)").checked(check_container_digest, "sha256: + 64 lowercase hex, or empty"),
    Field(ANCHOR_KEY(container.required), "Fail the pin (the pilot's first stage: before any training) when no container digest is known from the config, the environment or the runtime (provisioned nodes).",
          "pin (#2)"),

    // budget ---------------------------------------------------------------
    Field(ANCHOR_KEY(budget.catalog), "Device catalog (memory, throughput, prices); empty: `./configs/catalog.yaml`, else `share/anchor/catalog.yaml` of the installed anchor (beside its `bin/`).",
          "plan (#6)").config_relative(),
    Field(ANCHOR_KEY(budget.devices), "Catalog device names to plan for; empty: all.", "plan (#6)"),
    Field(ANCHOR_KEY(budget.headroom), "Fraction of device memory kept free when deciding what fits.",
          "plan (#6)").at_least(0).below(1),
    Field(ANCHOR_KEY(budget.failures_per_day), "Expected interruptions per node-day, for the checkpoint interval (Young/Daly).",
          "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.restart_minutes), "Minutes lost per restart after an interruption.", "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.download_gb), "GB downloaded before training (data, weights, images).", "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.preprocess_hours), "Hours of preprocessing before training.", "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.export_gb), "GB copied off the node after training.", "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.egress_gbps), "Bandwidth off the node, Gbit/s.", "plan (#6)").above(0),
    Field(ANCHOR_KEY(budget.ingress_gbps), "Bandwidth onto the node, Gbit/s.", "plan (#6)").above(0),
    Field(ANCHOR_KEY(budget.download_command), "A command (argv, no shell) that downloads a sample of the data into the directory {out} stands for: the pilot runs it once in the config file's directory and times it, and the plan's download takes budget.download_gb at that rate (MEASURED) instead of budget.ingress_gbps (docs/plan.md, \"Download and preprocess\"). Empty: the download stays ASSUMED.",
          "plan (#44)"),
    Field(ANCHOR_KEY(budget.preprocess_command), "A command (argv, no shell) that preprocesses the sample at {in} into the directory {out}: the pilot runs it once and times it, and the plan's preprocessing takes budget.download_gb at that rate (MEASURED) instead of budget.preprocess_hours. Empty: preprocessing stays ASSUMED.",
          "plan (#44)"),
    Field(ANCHOR_KEY(budget.preprocess_sample), "The raw-data sample (a file or directory) budget.preprocess_command reads at {in}; empty: what budget.download_command downloaded.",
          "plan (#44)").config_relative(),
    Field(ANCHOR_KEY(budget.pipeline_timeout_s), "Seconds the download or preprocess command may run on its sample before anchor kills it and fails the pilot.",
          "plan (#44)").above(0).at_most(31536000).because("a year: longer is no timeout at all"),
    Field(ANCHOR_KEY(budget.eval_every_steps), "Periodic eval interval in the long run, in steps; 0: none.",
          "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.nodes), "Nodes the long run may use at most: the plan searches GPU counts up to nodes x gpus_per_node.", "plan (#6)").at_least(1),
    Field(ANCHOR_KEY(budget.gpus_per_node), "Accelerators per node in the long run.", "plan (#6)").at_least(1),
    Field(ANCHOR_KEY(budget.margin), "Schedule margin added to the estimate, as a fraction.", "plan (#6)").at_least(0),
    Field(ANCHOR_KEY(budget.deadline_days), "Days the whole run must end within, margin included: the plan recommends the cheapest GPU count that does.", "plan (#44)").above(0),
    Field(ANCHOR_KEY(budget.min_scaling_efficiency), "Scaling efficiency below which more GPUs stop paying: the knee the plan names.", "plan (#44)").above(0).at_most(1),
    Field(ANCHOR_KEY(budget.search_gpu_count), "Search GPU counts 1, 2, 4, ... up to nodes x gpus_per_node for the cheapest that meets the deadline; false: plan exactly nodes x gpus_per_node.", "plan (#44)"),

    // program --------------------------------------------------------------
    Field(ANCHOR_KEY(program.command), "Your training program as a command line (argv, no shell), started once per rank as worker A and worker B with the contract's variables (docs/program.md); the first entry is looked up in PATH (program.env's PATH when it sets one), or relative to program.cwd when it has a /. Empty: the built-in trainer.",
          "your own program (#15)"),
    Field(ANCHOR_KEY(program.cwd), "The program's working directory; empty: the config file's directory.",
          "your own program (#15)").config_relative(),
    Field(ANCHOR_KEY(program.env), "NAME=VALUE entries added to the program's environment (recorded in the effective config, so keep secrets out).",
          "your own program (#15)"),
    Field(ANCHOR_KEY(program.timeout_s), "Seconds a worker of the program may run before anchor kills it and fails the pilot.",
          "your own program (#15)").above(0).at_most(31536000).because("a year: longer is no timeout at all"),
  };
  // clang-format on
}

#undef ANCHOR_KEY

// A number as a person writes it: 1, 0.5, 1e-08.
std::string num_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<long long>(v));
  }
  return nlohmann::json(v).dump();
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return (n.Tag() == "!" ? "the quoted string " : "") + quote(n.Scalar());
    default: return "an undefined value";
  }
}

// Numbers and booleans must be plain scalars: a quoted "4" is a string.
bool plain_scalar(const YAML::Node& n, const char* core_tag) {
  return n.IsScalar() && (n.Tag() == "?" || n.Tag() == std::string("tag:yaml.org,2002:") + core_tag);
}

// No number in a config is longer than this; longer scalars are rejected
// before any regex sees them (libstdc++'s regex recurses per character, and a
// long digit string exhausted memory under fuzz_config).
constexpr std::size_t kMaxNumberChars = 64;

std::optional<std::int64_t> parse_int(const std::string& s) {
  if (s.size() > kMaxNumberChars) return std::nullopt;
  static const std::regex kInt("[-+]?[0-9]+");
  // 1e9, 2.5e9: accepted when the value is a whole number (token counts).
  static const std::regex kSci("[-+]?[0-9]+(\\.[0-9]+)?[eE]\\+?[0-9]+");
  if (std::regex_match(s, kInt)) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == ERANGE) return std::nullopt;
    return v;
  }
  if (std::regex_match(s, kSci)) {
    double d = std::strtod(s.c_str(), nullptr);
    if (d != std::floor(d) || std::fabs(d) > 9.0e15) return std::nullopt;
    return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> parse_double(const std::string& s) {
  static const std::regex kNum("[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?");
  if (s.size() > kMaxNumberChars || !std::regex_match(s, kNum)) return std::nullopt;
  double d = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::string check_bounds(const Field& f, double v) {
  bool ok = true;
  if (f.lo) ok = ok && (f.lo->inclusive ? v >= f.lo->value : v > f.lo->value);
  if (f.hi) ok = ok && (f.hi->inclusive ? v <= f.hi->value : v < f.hi->value);
  if (ok) return "";
  std::string msg = "must be " + constraint_text(f) + ", got " + num_text(v);
  if (!f.why.empty()) msg += " (" + f.why + ")";
  return msg;
}

// "" when s is valid UTF-8, else where it is not. The effective config is
// JSON (digest, manifest, report), and JSON strings must be UTF-8 (found by
// fuzz_config: an accepted config whose digest could not be computed).
std::string utf8_problem(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (!ok) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "is not valid UTF-8 (byte 0x%02X at offset %zu)", c, i);
      return buf;
    }
    i += len;
  }
  return "";
}

// "" when s holds no NUL byte, else where it does. YAML's "\0" escape (and
// JSON's "\u0000") can put one in a value; every path and name in a config
// ends up in a C API (open, stat, mkdir, dlopen) that reads it as the end of
// the string, so the file would act on a shorter path than the one recorded.
std::string nul_problem(const std::string& s) {
  const auto at = s.find('\0');
  if (at == std::string::npos) return "";
  return "contains a NUL byte (\\0) at offset " + std::to_string(at) +
         ": the operating system would see the value cut short there; remove it";
}

std::string check_string(const Field& f, const std::string& s) {
  // Before anything quotes the value into a message: it would carry the NUL along.
  if (auto e = nul_problem(s); !e.empty()) return "the value " + e;
  if (auto e = utf8_problem(s); !e.empty()) return "the value " + e;
  if (!f.allowed.empty() && std::find(f.allowed.begin(), f.allowed.end(), s) == f.allowed.end()) {
    std::string msg = quote(s) + " is not allowed; allowed: ";
    for (std::size_t i = 0; i < f.allowed.size(); ++i) msg += (i ? ", " : "") + f.allowed[i];
    return msg;
  }
  if (f.check) return f.check(s);
  return "";
}

std::string expected(Type t) { return "expected " + type_name(t); }

template <class T>
std::string assign_as(const Field& f, T& dst, const YAML::Node& n, YAML::Mark*) {
  Type t = f.type();
  if constexpr (std::is_same_v<T, bool>) {
    static const char* kTrue[] = {"true", "True", "TRUE"};
    static const char* kFalse[] = {"false", "False", "FALSE"};
    if (plain_scalar(n, "bool")) {
      for (const char* s : kTrue) {
        if (n.Scalar() == s) {
          dst = true;
          return "";
        }
      }
      for (const char* s : kFalse) {
        if (n.Scalar() == s) {
          dst = false;
          return "";
        }
      }
    }
    return expected(t) + ", got " + describe(n);
  } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::int64_t>) {
    std::optional<std::int64_t> v;
    if (plain_scalar(n, "int")) v = parse_int(n.Scalar());
    if (!v) return expected(t) + ", got " + describe(n);
    if (std::is_same_v<T, int> && (*v < INT_MIN || *v > INT_MAX))
      return "got " + n.Scalar() + ", out of range for a 32-bit integer";
    if (auto e = check_bounds(f, static_cast<double>(*v)); !e.empty()) return e;
    dst = static_cast<T>(*v);
    return "";
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    static const std::regex kUInt("\\+?[0-9]+");
    if (plain_scalar(n, "int") && std::regex_match(n.Scalar(), kUInt)) {
      errno = 0;
      unsigned long long v = std::strtoull(n.Scalar().c_str(), nullptr, 10);
      if (errno != ERANGE) {
        dst = v;
        return "";
      }
      return "got " + n.Scalar() + ", larger than the largest 64-bit value";
    }
    return expected(t) + ", got " + describe(n);
  } else if constexpr (std::is_same_v<T, double>) {
    std::optional<double> v;
    if (plain_scalar(n, "float") || plain_scalar(n, "int")) v = parse_double(n.Scalar());
    if (!v) return expected(t) + ", got " + describe(n);
    if (auto e = check_bounds(f, *v); !e.empty()) return e;
    dst = *v;
    return "";
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!n.IsScalar()) return expected(t) + ", got " + describe(n);
    if (auto e = check_string(f, n.Scalar()); !e.empty()) return e;
    dst = n.Scalar();
    return "";
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    return "";  // handled in assign (needs the item marks)
  }
}

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = make_fields();
  return kFields;
}

const Field* find(const std::string& key) {
  static const std::map<std::string, const Field*> kIndex = [] {
    std::map<std::string, const Field*> m;
    for (const auto& f : fields()) m.emplace(f.key, &f);
    return m;
  }();
  auto it = kIndex.find(key);
  return it == kIndex.end() ? nullptr : it->second;
}

bool is_section(const std::string& dotted) {
  const std::string prefix = dotted + ".";
  for (const auto& f : fields())
    if (f.key.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

std::vector<std::string> children(const std::string& section) {
  const std::string prefix = section.empty() ? "" : section + ".";
  std::vector<std::string> out;
  for (const auto& f : fields()) {
    if (f.key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = f.key.substr(prefix.size());
    std::string name = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

std::string type_name(Type t) {
  switch (t) {
    case Type::kBool: return "a boolean (true or false)";
    case Type::kInt: return "an integer";
    case Type::kInt64: return "an integer (64-bit)";
    case Type::kUInt64: return "an unsigned integer (64-bit)";
    case Type::kDouble: return "a number";
    case Type::kString: return "a string";
    case Type::kStringList: return "a list of strings, e.g. [a.txt, b.txt]";
  }
  return "?";
}

std::string constraint_text(const Field& f) {
  std::string out;
  if (f.lo && f.hi) {
    out = (f.lo->inclusive ? ">= " : "> ") + num_text(f.lo->value) + " and " + (f.hi->inclusive ? "<= " : "< ") +
          num_text(f.hi->value);
  } else if (f.lo) {
    out = (f.lo->inclusive ? ">= " : "> ") + num_text(f.lo->value);
  } else if (f.hi) {
    out = (f.hi->inclusive ? "<= " : "< ") + num_text(f.hi->value);
  }
  if (!f.allowed.empty()) {
    out = "one of: ";
    for (std::size_t i = 0; i < f.allowed.size(); ++i) out += (i ? ", " : "") + f.allowed[i];
  }
  if (!f.check_doc.empty()) out += (out.empty() ? "" : "; ") + f.check_doc;
  return out;
}

nlohmann::json get_json(const Field& f, const Config& c) {
  // The accessors take Config& so one table serves reads and writes; a read
  // never modifies.
  Config& mc = const_cast<Config&>(c);
  return std::visit([&](auto ref) { return nlohmann::json(ref(mc)); }, f.ref);
}

std::string default_text(const Field& f) {
  static const Config kDefaults{};
  return get_json(f, kDefaults).dump();
}

std::string assign(const Field& f, Config& c, const YAML::Node& value, YAML::Mark* where) {
  if (value.IsNull())
    return "missing value: " + expected(f.type()) + " (remove the key to use the default " + default_text(f) + ")";
  if (f.type() == Type::kStringList) {
    auto& dst = std::get<Ref<std::vector<std::string>>>(f.ref)(c);
    if (!value.IsSequence()) return expected(f.type()) + ", got " + describe(value);
    std::vector<std::string> items;
    for (const auto& item : value) {
      if (!item.IsScalar() || item.Scalar().empty()) {
        if (where) *where = item.Mark();
        return "list entries must be non-empty strings, got " +
               (item.IsScalar() ? std::string("an empty string") : describe(item));
      }
      if (auto e = nul_problem(item.Scalar()); !e.empty()) {
        if (where) *where = item.Mark();
        return "a list entry " + e;
      }
      if (auto e = utf8_problem(item.Scalar()); !e.empty()) {
        if (where) *where = item.Mark();
        return "a list entry " + e;
      }
      items.push_back(item.Scalar());
    }
    if (f.required && items.empty()) return "must list at least one entry";
    dst = std::move(items);
    return "";
  }
  return std::visit(
      [&](auto ref) -> std::string {
        auto& dst = ref(c);
        using T = std::decay_t<decltype(dst)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return "";
        } else {
          return assign_as<T>(f, dst, value, where);
        }
      },
      f.ref);
}

std::string assign_empty(const Field& f, Config& c) {
  if (f.type() == Type::kString) {
    // The checks an explicit '' gets: non-empty, allowed values, the key's own check.
    if (auto e = check_string(f, ""); !e.empty()) return e;
    std::get<Ref<std::string>>(f.ref)(c).clear();
  } else if (f.type() == Type::kStringList) {
    if (f.required) return "must list at least one entry";
    std::get<Ref<std::vector<std::string>>>(f.ref)(c).clear();
  }
  return "";
}

void emit_value(const Field& f, const Config& c, YAML::Emitter& out) {
  Config& mc = const_cast<Config&>(c);
  std::visit(
      [&](auto ref) {
        const auto& v = ref(mc);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out << YAML::Flow << YAML::BeginSeq;
          for (const auto& s : v) out << s;
          out << YAML::EndSeq;
        } else if constexpr (std::is_same_v<T, double>) {
          // Shortest text that reads back as the same double (yaml-cpp's own
          // double output is either lossy or noisy: 0.10000000000000001).
          std::string text = nlohmann::json(v).dump();
          out << text;
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          out << static_cast<unsigned long long>(v);
        } else {
          out << v;
        }
      },
      f.ref);
}

std::string markdown_row(const Field& f) {
  std::string type;
  switch (f.type()) {
    case Type::kBool: type = "bool"; break;
    case Type::kInt: type = "int"; break;
    case Type::kInt64: type = "int64"; break;
    case Type::kUInt64: type = "uint64"; break;
    case Type::kDouble: type = "number"; break;
    case Type::kString: type = f.path == PathKind::kNone ? "string" : "path"; break;
    case Type::kStringList: type = f.path == PathKind::kNone ? "list of strings" : "list of paths/globs"; break;
  }
  std::string meaning = f.doc;
  if (f.path == PathKind::kConfigRelative) meaning += " Relative to the config file's directory.";
  if (f.path == PathKind::kCwdRelative) meaning += " Relative to the current directory.";
  std::string allowed = constraint_text(f);
  if (allowed.empty()) allowed = "any";
  return "| `" + f.key + "` | " + type + " | " + (f.required ? std::string("required") : "`" + default_text(f) + "`") +
         " | " + allowed + " | " + meaning + " | " + f.used_by + " |";
}

}  // namespace anchor::config::schema
