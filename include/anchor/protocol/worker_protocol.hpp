#pragma once
// The worker protocol (version 1), the one contract between the supervisor and
// a worker of either kind (docs/program.md, "The contract";
// docs/worker-protocol.schema.json): what a worker is told (Spec, as the JSON
// file ANCHOR_PILOT_SPEC names, plus torchrun's variables) and the JSON lines
// it reports (Event). The user's program speaks it through the Python helper
// python/anchor_pilot, into the events file its spec names; anchor's built-in
// worker speaks it in C++ (to_json below), on its stdout, each line after
// "@anchor-event " (events.hpp). One typed struct per line, one parser
// (parse_event) and one serialiser (to_json).
//
//   auto spec = protocol::Spec{...};  fs::atomic_write_file(path, protocol::to_json(spec).dump());
//   protocol::EventReader r(events_path);  for (auto& e : r.poll()) ...;  // as the file grows
//   protocol::WorkerLog ref = protocol::collect(events, 0);               // one rank's account
//   auto v = protocol::compare(ref, resumed, tolerance);                  // the verdict
//   std::string line = dump_json(protocol::to_json(protocol::line(protocol::StageLine{...})));
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/protocol/compare.hpp"

namespace anchor::protocol {

inline constexpr int kProtocol = 1;
// The components in the order a verdict names the first that differs.
inline constexpr const char* kComponentOrder[] = {"model", "optimizer", "scheduler", "scaler", "rng", "data"};

enum class Role { kReference, kResume, kProbe };
const char* role_name(Role r);

// The environment variable that names a worker's spec file, for both kinds of worker.
inline constexpr const char* kSpecEnv = "ANCHOR_PILOT_SPEC";
// Spec::events of the built-in worker: its lines go to its stdout, after "@anchor-event ".
inline constexpr const char* kEventsOnStdout = "-";

// What a worker is told, as the JSON file ANCHOR_PILOT_SPEC names. A path
// that is not UTF-8 travels as "<key>_hex" (its bytes in hex) beside "<key>"
// (set_path_field); a program pilot refuses such paths before it starts.
struct Spec {
  Role role = Role::kReference;
  std::string run_dir, checkpoint_dir, events;  // absolute; events: a file, or kEventsOnStdout
  std::vector<std::int64_t> save_at;            // steps to save at
  std::int64_t stop_at = 0;                     // the last step
  std::optional<std::string> restore;           // a step directory; none: the newest that verifies (resume)
  std::uint64_t seed = 0;
  bool deterministic = true;
  std::int64_t digests_every = 0;
  std::optional<std::int64_t> kill_in_save;  // the save anchor kills (rank 0 waits in it after its first file)
  std::optional<std::pair<std::int64_t, std::int64_t>> probe;  // role probe: (micro_batch, seq_len) to run at
  // "start_from": "latest" (the built-in worker A of pilot.start_from latest):
  // the worker first restores the newest committed checkpoint that verifies,
  // and save_at, stop_at and kill_in_save count from its step. Absent: from 0.
  bool start_latest = false;
  // "profile_step": the step the helper runs under torch.profiler (worker B's last);
  // rank 0 writes the trace to <run_dir>/profile.json.
  std::optional<std::int64_t> profile_step;
  // "probe_more" (worker B, or a probe; one rank): the memory probe's points, each
  // forked by the helper at anchor_pilot.shape() and run under the spec file named
  // (a file name in the spec's directory), so that the program's imports are paid once.
  struct ProbePoint {
    std::int64_t micro_batch = 0, seq_len = 0;
    std::string spec;
    bool operator==(const ProbePoint& o) const {
      return micro_batch == o.micro_batch && seq_len == o.seq_len && spec == o.spec;
    }
  };
  std::vector<ProbePoint> probe_more;
  // "precision_reference" (role resume): the program's Pilot.autocast() regions run in fp32.
  bool precision_reference = false;
  // "reshard": {"from": A, "to": B} when worker B runs at another world size
  // than worker A (pilot.resume_world_size): both fingerprint the full state
  // (a DTensor gathered, not this rank's shard), so that the two compare.
  std::optional<std::pair<std::int64_t, std::int64_t>> reshard;
};
nlohmann::json to_json(const Spec& s);
// The spec as JSON, checked as the helper checks it (python/anchor_pilot/spec.py):
// every problem (an unknown or missing key, a wrong type, a kill_in_save not in
// save_at, a probe without role probe, a restore outside role resume) at once.
// Throws Error (kRuntime) naming `where` and them.
Spec spec_from_json(const nlohmann::json& j, const std::string& where);
// The spec file `path`: its JSON (parse_json) through spec_from_json.
Spec read_spec(const std::string& path);

// A number as the helper writes it: a JSON number, "inf"/"-inf", or null (NaN or unknown).
struct Number {
  bool known = false;  // false: null
  double value = 0;
  bool operator==(const Number& o) const;  // known: the same bits or equal (+0 == -0); null == null
  std::string text() const;                // "2.7725887298583984", "inf", "null"
};

struct Versions {
  std::string torch, cuda, cudnn, nccl, python;  // "" when the worker says null
};
// What the program told anchor_pilot.shape(): its step's shape, for the plan.
struct Shape {
  std::int64_t micro_batch = 0, seq_len = 0, grad_accum = 1;
  std::string precision = "fp32";
  std::optional<std::int64_t> n_layer, n_embd;
  std::optional<double> flops_per_token;
  bool probe = false;  // it runs at the shape shape() returns: anchor may probe others
};
struct Hello {
  std::string role;
  int world_size = 1;
  Versions versions;
  std::string anchor_pilot;  // the helper's version (a program)
  std::string anchor;        // the build's version (anchor's built-in worker)
  std::optional<std::int64_t> parameters;
  std::string executable;
  std::optional<std::int64_t> pid;
  std::optional<Shape> shape;
  // "helper": the helper writes and restores the checkpoints; "program": the
  // program's own save and load code, observed (saving()/restored()).
  std::string checkpoints = "helper";
};
struct StepLine {
  std::int64_t step = 0;  // the step count after this step (1 for the first step of a run)
  Number loss, grad_norm, lr;
  std::string batch;  // SHA-256 of the step's input batch, when the program gives it ("" otherwise)
  std::string rng;    // SHA-256 of the RNG streams at the step's start, when the helper says it ("" otherwise)
  // Each stream's SHA-256 on its own ("torch", "cuda", "python", "numpy"): the helper's first two step lines.
  std::vector<std::pair<std::string, std::string>> rng_streams;
  // torch.initial_seed(), the seed torch's CPU generator was last seeded with, on the
  // helper's first step line of each rank (the seed the rank actually used; docs/program.md "What is pinned").
  std::optional<std::uint64_t> torch_seed;
  std::optional<std::int64_t> tokens;
  std::optional<double> data_wait_s, compute_s;
  std::optional<std::int64_t> stop_at;  // the step count this worker stops at, when it says (the built-in does)
  std::string autocast;                 // what Pilot.autocast() ran the forward in ("" when not used)
  std::optional<double> loss_scale;     // a GradScaler's scale after the step's update()
  bool scaler_skipped = false;          // the GradScaler skipped the optimizer step (inf/NaN gradient)
};
struct EvalLine {
  std::int64_t step = 0;
  Number loss;
  // "before_save" / "after_restore": the helper ran the program's evaluate() in the save of
  // `step` or right after restoring it; "" for the program's own eval lines.
  std::string when;
  std::optional<double> seconds;
};
struct DigestsLine {
  std::optional<std::int64_t> step;
  std::string when;                                             // step | save | restore | final
  std::vector<std::pair<std::string, std::string>> components;  // name -> SHA-256, as written
  const std::string* find(const std::string& name) const;
};
struct CheckpointLine {
  std::string op;     // save | restore
  std::string phase;  // begin | end | skip | kill_window
  std::optional<std::int64_t> step;
  std::string dir;
  std::optional<std::int64_t> bytes;
  std::optional<double> seconds;
  std::vector<std::string> problems;  // skip
  std::string point;                  // kill_window
  std::vector<std::string> files;     // an observed save's end: what it wrote, relative to dir
};
// A stage's memory. The helper's own stage lines (load, train, eval,
// checkpoint_save, restore, eval_after_restore) carry `window` and the peaks
// since it began; the program's Pilot.memory(stage) lines the figures now.
struct MemoryLine {
  std::string stage, device, window;
  std::optional<std::int64_t> allocated_bytes, reserved_bytes, max_allocated_bytes, total_bytes, rss_bytes;
  std::optional<std::int64_t> peak_rss_bytes, peak_allocated_bytes, peak_reserved_bytes, free_bytes;
};
// A memory probe point's end, as the process that forked it saw it (appended to
// the point's events file): its exit status (a signal when negative) and its
// seconds from the fork to its exit.
struct ForkedLine {
  int status = 0;
  double seconds = 0;
};
// One step run under torch.profiler (the spec's profile_step).
struct ProfileLine {
  std::int64_t step = 0;
  // matmul_flops: a 512x512 fp32 matmul's FLOP/s on the device, timed right after (the MFU's reference)
  std::optional<double> seconds, comm_s, matmul_flops;
  std::optional<std::int64_t> events;
  std::string profiler, file, error;  // file: rank 0's trace in the run directory
};
// The peak of a process's second step (the first reset it), the state's bytes
// and what the process held before its first step.
struct StepMemoryLine {
  std::int64_t step = 0;
  std::string device, peak_source;
  std::optional<std::int64_t> peak_bytes, baseline_bytes;
  std::int64_t parameters_bytes = 0, gradients_bytes = 0, optimizer_bytes = 0;
};
struct ErrorLine {
  std::string message;
  std::string kind;  // the exception's class name ("RestoreError"), "" when not given
  std::string hint;  // what to do, "" when not given
};
// A stage of the built-in worker (docs/pilot.md, "Stages"): its begin, and its
// end with how it ended and how long it took. A program has no stages.
struct StageLine {
  std::string stage;
  std::string phase;              // begin | end
  std::string status;             // end: passed (a failed stage ends with an error line instead)
  std::optional<double> seconds;  // end
};
struct Distribution {
  std::string name, version, dist_info;
};
struct ProgramLine {
  std::string root, executable;
  std::vector<std::string> sources, sys_path;
  std::vector<Distribution> distributions;
  std::string distributions_error;  // the helper could not list them
};

using Body = std::variant<Hello, StepLine, EvalLine, DigestsLine, CheckpointLine, MemoryLine, StepMemoryLine, ErrorLine,
                          ProgramLine, StageLine, ProfileLine, ForkedLine>;
struct Event {
  std::string type;
  int rank = 0;
  double time = 0;
  Body body;
  nlohmann::json raw;  // the line as read, for events.jsonl
};

// The line's "type" for a body: "hello", "step", ..., "stage".
const char* type_of(const Body& b);
// An event of this process now: `b` with its type, `rank` and the time (Unix seconds).
Event line(Body b, int rank = 0);
// The line as JSON, the inverse of parse_event: {"type", "rank", "time", and
// the body's fields}; an unknown figure (Number) is null, an infinite one
// "inf"/"-inf"; an absent optional field is left out. Strings go out as given
// (dump it with dump_json: a byte that is not UTF-8 is written as \xNN).
nlohmann::json to_json(const Event& e);

// Parses one line. Throws Error (kRuntime) saying what is wrong with it:
// not JSON, not an object, an unknown type, a missing or mistyped field.
// Unknown fields are allowed (a newer helper may add some).
Event parse_event(const std::string& line);

// Reads an events file as it grows: poll() returns the complete lines added
// since the last call, parsed. A line that does not parse is an error naming
// the file and line number.
class EventReader {
 public:
  // `max_lines`: a file with more lines than this is refused (Error kRuntime)
  // as soon as they are read, before they are parsed and held; `max_bytes`: a
  // file larger than this, as soon as its size is seen, before it is read.
  explicit EventReader(std::string path, std::uint64_t max_lines = UINT64_MAX, std::uint64_t max_bytes = UINT64_MAX)
      : path_(std::move(path)), max_lines_(max_lines), max_bytes_(max_bytes) {}
  std::vector<Event> poll();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::uint64_t max_lines_, max_bytes_;
  std::uint64_t offset_ = 0;
  std::uint64_t line_no_ = 0;
  std::string partial_;
};

// One rank's account, in the order it was written.
struct WorkerLog {
  std::optional<Hello> hello;
  std::vector<StepLine> steps;
  std::vector<EvalLine> evals;
  std::vector<DigestsLine> digests;
  std::vector<CheckpointLine> checkpoints;
  std::vector<MemoryLine> memory;
  std::optional<StepMemoryLine> step_memory;
  std::optional<ProfileLine> profile;
  std::optional<ForkedLine> forked;
  std::vector<ErrorLine> errors;
  std::optional<ProgramLine> program;
  void add(const Event& e);
  // The digests line of `when` at `step` (the last one when several), or null.
  const DigestsLine* digests_at(const std::string& when, std::int64_t step) const;
  const CheckpointLine* checkpoint(const std::string& op, const std::string& phase, std::int64_t step) const;
};

// The resume verdict for one rank: the resumed run against the reference
// (the verdict type and the tolerance rule: anchor/protocol/compare.hpp).
// 1. the digests after the restore against the reference's at the saved step,
// 2. the loss of every resumed step against the reference's at that step,
// 3. the digests of the resumed run's save at the last step against the
//    reference's (the save the supervisor killed reports them first).
// Digests are compared exactly (a SHA-256); losses bitwise when tolerance is
// 0, else within_tolerance, and then a differing state at the last step is
// reported in its check but does not fail. Causes: the first component that
// differs, "checkpoint" (the wrong step restored), "loss" or "steps". Where
// both runs give a step's input batch digest, the first resumed step whose
// batch differs is a failed check of its own, cause "data" (the resumed run
// trains on other data: the data cursor), before the losses. Where the
// restored state is equal but the RNG streams differ at the first resumed
// step's start, that is a failed check, cause "rng": something drew from
// them between the restore and the step.
// `observed`: the program's own save and load code (hello "checkpoints":
// "program"): the digests are the helper's fingerprints of the live state,
// RNG streams one by one ("rng.torch"), and a state restored wrongly is said
// in the program's terms, every differing component named ("the scheduler:
// after your load its state differs from your save of step K").
Verdict compare(const WorkerLog& reference, const WorkerLog& resumed, std::int64_t save_step, std::int64_t last_step,
                double tolerance, bool observed = false);
// A resume at another world size (pilot.resume_world_size, spec "reshard"):
// both runs fingerprinted the full state (each DTensor gathered), so rank 0's
// save of `save_step` and rank 0's state after the program's load compare
// component by component, bitwise, except each rank's own (its RNG streams
// and data cursor: "rng.*", "data"), which a reshard does not carry rank for
// rank: those are listed as not compared. The steps after it train on
// another split of the data: each resumed step up to `last_step` must be
// reported with a finite loss; the losses are shown, not compared. Mode
// "resharded".
Verdict compare_resharded(const WorkerLog& reference, const WorkerLog& resumed, std::int64_t save_step,
                          std::int64_t last_step, std::int64_t from_world, std::int64_t to_world);
// What a component of the helper's fingerprints is, in a user's words
// ("scheduler" -> "the scheduler", "rng.torch" -> "torch's CPU random generator").
std::string component_words(const std::string& component);

}  // namespace anchor::protocol
