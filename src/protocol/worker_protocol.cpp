#include "anchor/protocol/worker_protocol.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iterator>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::protocol {
namespace {

using nlohmann::json;

// A line longer than this is not one the helper writes (its longest, the
// program line, lists sources and distributions: tens of kB).
constexpr std::size_t kMaxLine = 16u << 20;

Error bad(const std::string& why) {
  return Error(ErrorKind::kRuntime, why,
               "the events file is written by anchor_pilot (docs/program.md); use the anchor_pilot that ships with "
               "this anchor and do not write to the file otherwise");
}

// Field reads go through JsonFields, whose messages name the field as
// `"<event>".key`; these two read what only this protocol writes.

// A library version: a string, or a number (cuDNN's is an integer), or absent.
std::string version(const JsonFields& f, const char* key) {
  if (!f.has(key)) return "";
  const json& v = f.need(key);
  if (v.is_number()) return v.dump();
  return f.str(key);
}

// A figure that may be infinite (Python's json writes no infinity; the helper sends "inf").
Number number(const JsonFields& f, const char* key) {
  Number n;
  if (!f.has(key)) return n;
  n.known = true;
  const json& v = f.need(key);
  if (v.is_string() && (v == "inf" || v == "-inf")) {
    n.value = v == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  } else if (v.is_number()) {
    n.value = v.get<double>();
  } else {
    throw bad(f.path(key) + " is " + dump_json(v) + ", expected a number, \"inf\", \"-inf\" or null");
  }
  return n;
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Hello parse_hello(const JsonFields& f) {
  Hello h;
  if (f.integer("protocol") != kProtocol)
    throw Error(ErrorKind::kRuntime,
                "the program speaks protocol " + dump_json(f.need("protocol")) + "; this anchor speaks protocol " +
                    std::to_string(kProtocol),
                "install the anchor_pilot that ships with this anchor: pip install <anchor>/python");
  h.role = f.str("role");
  h.world_size = static_cast<int>(f.integer("world_size"));
  const JsonFields v(f.object("versions"), f.path("versions"));
  h.versions = {version(v, "torch"), version(v, "cuda"), version(v, "cudnn"), version(v, "nccl"), version(v, "python")};
  h.anchor_pilot = f.str_or("anchor_pilot", "");
  h.anchor = f.str_or("anchor", "");
  h.parameters = f.optional_integer("parameters");
  h.executable = f.str_or("executable", "");
  h.pid = f.optional_integer("pid");
  h.checkpoints = f.str_or("checkpoints", "helper");
  if (h.checkpoints != "helper" && h.checkpoints != "program")
    throw bad("\"hello\".checkpoints is \"" + printable(h.checkpoints) + "\", expected helper or program");
  if (f.has("shape")) {
    const JsonFields s(f.object("shape"), f.path("shape"));
    Shape sh;
    sh.micro_batch = s.integer("micro_batch");
    sh.seq_len = s.integer("seq_len");
    sh.grad_accum = s.integer_or("grad_accum", 1);
    sh.precision = s.str("precision");
    sh.n_layer = s.optional_integer("n_layer");
    sh.n_embd = s.optional_integer("n_embd");
    sh.flops_per_token = s.optional_number("flops_per_token");
    sh.probe = s.boolean("probe");
    auto size_ok = [](std::int64_t n) { return n >= 1 && n < (std::int64_t{1} << 31); };
    if (!size_ok(sh.micro_batch) || !size_ok(sh.seq_len) || !size_ok(sh.grad_accum) ||
        !size_ok(sh.n_layer.value_or(1)) || !size_ok(sh.n_embd.value_or(1)) ||
        !(sh.flops_per_token.value_or(1) > 0 && sh.flops_per_token.value_or(1) < 1e30))
      throw bad("\"hello\".shape " + dump_json(f.need("shape")) +
                " has a size outside 1 .. 2^31-1 or FLOPs not in (0, 1e30)");
    if (sh.precision != "fp32" && sh.precision != "bf16" && sh.precision != "fp16")
      throw bad("\"hello\".shape.precision is \"" + printable(sh.precision) + "\", expected fp32, bf16 or fp16");
    h.shape = sh;
  }
  return h;
}

DigestsLine parse_digests(const JsonFields& f) {
  DigestsLine d;
  d.step = f.optional_integer("step");
  d.when = f.str("when");
  if (d.when != "step" && d.when != "save" && d.when != "restore" && d.when != "final")
    throw bad("\"digests\".when is \"" + printable(d.when) + "\", expected step, save, restore or final");
  for (const auto& [name, v] : f.object("components").items()) {
    if (!v.is_string() || !is_sha256(v.get<std::string>()))
      throw bad("\"digests\".components." + printable(name) + " is " + dump_json(v) + ", expected a SHA-256 (64 hex)");
    d.components.emplace_back(name, v.get<std::string>());
  }
  return d;
}

StepMemoryLine parse_step_memory(const JsonFields& f) {
  StepMemoryLine m;
  m.step = f.integer("step");
  m.device = f.str("device");
  m.peak_source = f.str("peak_source");
  m.peak_bytes = f.optional_integer("peak_bytes");
  m.baseline_bytes = f.optional_integer("baseline_bytes");
  const JsonFields st(f.object("state"), f.path("state"));
  m.parameters_bytes = st.integer("parameters");
  m.gradients_bytes = st.integer("gradients");
  m.optimizer_bytes = st.integer("optimizer");
  for (auto v : {m.peak_bytes.value_or(0), m.baseline_bytes.value_or(0), m.parameters_bytes, m.gradients_bytes,
                 m.optimizer_bytes})
    if (v < 0) throw bad("\"step_memory\" has a negative byte count");
  return m;
}

ProgramLine parse_program(const JsonFields& f) {
  ProgramLine p;
  p.root = f.str("root");
  p.executable = f.str("executable");
  p.sources = f.strings("sources");
  p.sys_path = f.strings("sys_path");
  const json& d = f.need("distributions");
  if (d.is_object()) {
    p.distributions_error = JsonFields(d, f.path("distributions")).str_or("error", "");
  } else if (d.is_array()) {
    for (std::size_t i = 0; i < d.size(); ++i) {
      const JsonFields e(d[i], JsonFields::item(f.path("distributions"), i));
      p.distributions.push_back({e.str("name"), e.str("version"), e.str("dist_info")});
    }
  } else {
    throw bad("\"program\".distributions is neither a list nor an error");
  }
  return p;
}

StageLine parse_stage(const JsonFields& f) {
  StageLine s;
  s.stage = f.str("stage");
  s.phase = f.str("phase");
  if (s.stage.empty()) throw bad("\"stage\".stage is empty");
  if (s.phase != "begin" && s.phase != "end")
    throw bad("\"stage\".phase is \"" + printable(s.phase) + "\", expected begin or end");
  s.status = f.str_or("status", "");
  s.seconds = f.optional_number("seconds");
  return s;
}

MemoryLine parse_memory(const JsonFields& f) {
  MemoryLine m;
  m.stage = f.str("stage");
  m.device = f.str_or("device", "");
  m.allocated_bytes = f.optional_integer("allocated_bytes");
  m.reserved_bytes = f.optional_integer("reserved_bytes");
  m.max_allocated_bytes = f.optional_integer("max_allocated_bytes");
  m.total_bytes = f.optional_integer("total_bytes");
  m.rss_bytes = f.optional_integer("rss_bytes");
  m.window = f.str_or("window", "");
  m.peak_rss_bytes = f.optional_integer("peak_rss_bytes");
  m.peak_allocated_bytes = f.optional_integer("peak_allocated_bytes");
  m.peak_reserved_bytes = f.optional_integer("peak_reserved_bytes");
  m.free_bytes = f.optional_integer("free_bytes");
  for (const auto& v : {m.allocated_bytes, m.reserved_bytes, m.max_allocated_bytes, m.total_bytes, m.rss_bytes,
                        m.peak_rss_bytes, m.peak_allocated_bytes, m.peak_reserved_bytes, m.free_bytes})
    if (v && *v < 0) throw bad("\"memory\" has a negative byte count");
  return m;
}

ProfileLine parse_profile(const JsonFields& f) {
  ProfileLine pr;
  pr.step = f.integer("step");
  pr.seconds = f.optional_number("seconds");
  pr.comm_s = f.optional_number("comm_s");
  pr.matmul_flops = f.optional_number("matmul_flops");
  for (const auto& v : {pr.seconds, pr.comm_s, pr.matmul_flops})
    if (v && !(*v >= 0)) throw bad("\"profile\" has a negative figure");
  pr.events = f.optional_integer("events");
  pr.profiler = f.str_or("profiler", "");
  pr.file = f.str_or("file", "");
  pr.error = f.str_or("error", "");
  if (pr.file.find('/') != std::string::npos || pr.file == "." || pr.file == "..")
    throw bad("\"profile\".file is \"" + printable(pr.file) + "\", expected a file name in the run directory");
  return pr;
}

Body parse_body(const std::string& type, const JsonFields& f) {
  if (type == "hello") return parse_hello(f);
  if (type == "step") {
    StepLine s;
    s.step = f.integer("step");
    s.loss = number(f, "loss");
    s.grad_norm = number(f, "grad_norm");
    s.lr = number(f, "lr");
    s.tokens = f.optional_integer("tokens");
    s.data_wait_s = f.optional_number("data_wait_s");
    s.compute_s = f.optional_number("compute_s");
    s.stop_at = f.optional_integer("stop_at");
    s.batch = f.str_or("batch", "");
    s.rng = f.str_or("rng", "");
    s.autocast = f.str_or("autocast", "");
    if (!s.autocast.empty() && s.autocast != "fp32" && s.autocast != "bf16" && s.autocast != "fp16")
      throw bad("\"step\".autocast is \"" + printable(s.autocast) + "\", expected fp32, bf16 or fp16");
    s.loss_scale = f.optional_number("loss_scale");
    if (s.loss_scale && !(*s.loss_scale > 0)) throw bad("\"step\".loss_scale is not positive");
    s.scaler_skipped = f.has("scaler_skipped") && f.need("scaler_skipped") == true;
    if (f.has("rng_streams"))
      for (const auto& [name, v] : f.object("rng_streams").items()) {
        if (!v.is_string() || !is_sha256(v.get<std::string>()))
          throw bad("\"step\".rng_streams." + printable(name) + " is " + dump_json(v) +
                    ", expected a SHA-256 (64 hex)");
        s.rng_streams.emplace_back(name, v.get<std::string>());
      }
    if (f.has("torch_seed")) {
      const json& v = f.need("torch_seed");
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
        throw bad("\"step\".torch_seed is " + dump_json(v) + ", expected an integer in [0, 2^64)");
      s.torch_seed = v.get<std::uint64_t>();
    }
    return s;
  }
  if (type == "eval") {
    EvalLine e{f.integer("step"), number(f, "loss"), f.str_or("when", ""), f.optional_number("seconds")};
    if (!e.when.empty() && e.when != "before_save" && e.when != "after_restore")
      throw bad("\"eval\".when is \"" + printable(e.when) + "\", expected before_save or after_restore");
    return e;
  }
  if (type == "digests") return parse_digests(f);
  if (type == "checkpoint") {
    CheckpointLine c;
    c.op = f.str("op");
    c.phase = f.str("phase");
    c.step = f.optional_integer("step");
    c.dir = f.str_or("dir", "");
    c.bytes = f.optional_integer("bytes");
    c.seconds = f.optional_number("seconds");
    if (f.has("problems")) c.problems = f.strings("problems");
    c.point = f.str_or("point", "");
    if (f.has("files")) c.files = f.strings("files");
    return c;
  }
  if (type == "memory") return parse_memory(f);
  if (type == "profile") return parse_profile(f);
  if (type == "forked") {
    ForkedLine fl{static_cast<int>(f.integer("status")), f.number("seconds")};
    if (!(fl.seconds >= 0)) throw bad("\"forked\".seconds is negative");
    return fl;
  }
  if (type == "step_memory") return parse_step_memory(f);
  if (type == "error") return ErrorLine{f.str("message"), f.str_or("kind", ""), f.str_or("hint", "")};
  if (type == "program") return parse_program(f);
  if (type == "stage") return parse_stage(f);
  throw bad("unknown event type \"" + printable(type) + "\"");
}

// ---- serialisers: one per body, the inverse of its parser ----

json number_json(const Number& n) {
  if (!n.known) return nullptr;
  if (std::isinf(n.value)) return n.value > 0 ? "inf" : "-inf";
  if (std::isnan(n.value)) return nullptr;
  return n.value;
}

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

json version_json(const std::string& v) { return v.empty() ? json(nullptr) : json(v); }

void body_json(json& j, const Hello& h) {
  j["protocol"] = kProtocol;
  j["role"] = h.role;
  j["world_size"] = h.world_size;
  j["versions"] = {{"torch", version_json(h.versions.torch)},
                   {"cuda", version_json(h.versions.cuda)},
                   {"cudnn", version_json(h.versions.cudnn)},
                   {"nccl", version_json(h.versions.nccl)},
                   {"python", version_json(h.versions.python)}};
  if (!h.anchor_pilot.empty()) j["anchor_pilot"] = h.anchor_pilot;
  if (!h.anchor.empty()) j["anchor"] = h.anchor;
  put(j, "parameters", h.parameters);
  if (!h.executable.empty()) j["executable"] = h.executable;
  put(j, "pid", h.pid);
  if (h.checkpoints != "helper") j["checkpoints"] = h.checkpoints;
  if (h.shape) {
    const Shape& s = *h.shape;
    j["shape"] = {{"micro_batch", s.micro_batch}, {"seq_len", s.seq_len}, {"grad_accum", s.grad_accum},
                  {"precision", s.precision},     {"n_layer", nullptr},   {"n_embd", nullptr},
                  {"flops_per_token", nullptr},   {"probe", s.probe}};
    if (s.n_layer) j["shape"]["n_layer"] = *s.n_layer;
    if (s.n_embd) j["shape"]["n_embd"] = *s.n_embd;
    if (s.flops_per_token) j["shape"]["flops_per_token"] = *s.flops_per_token;
  }
}

void body_json(json& j, const StepLine& s) {
  j["step"] = s.step;
  j["loss"] = number_json(s.loss);
  j["grad_norm"] = number_json(s.grad_norm);
  j["lr"] = number_json(s.lr);
  j["tokens"] = s.tokens ? json(*s.tokens) : json(nullptr);
  j["data_wait_s"] = s.data_wait_s ? json(*s.data_wait_s) : json(nullptr);
  j["compute_s"] = s.compute_s ? json(*s.compute_s) : json(nullptr);
  put(j, "stop_at", s.stop_at);
  if (!s.batch.empty()) j["batch"] = s.batch;
  if (!s.rng.empty()) j["rng"] = s.rng;
  if (!s.rng_streams.empty()) {
    j["rng_streams"] = json::object();
    for (const auto& [name, sha] : s.rng_streams) j["rng_streams"][name] = sha;
  }
  put(j, "torch_seed", s.torch_seed);
  if (!s.autocast.empty()) j["autocast"] = s.autocast;
  put(j, "loss_scale", s.loss_scale);
  if (s.scaler_skipped) j["scaler_skipped"] = true;
}

void body_json(json& j, const EvalLine& e) {
  j["step"] = e.step;
  j["loss"] = number_json(e.loss);
  if (!e.when.empty()) j["when"] = e.when;
  put(j, "seconds", e.seconds);
}

void body_json(json& j, const DigestsLine& d) {
  j["step"] = d.step ? json(*d.step) : json(nullptr);
  j["when"] = d.when;
  j["components"] = json::object();
  for (const auto& [name, sha] : d.components) j["components"][name] = sha;
}

void body_json(json& j, const CheckpointLine& c) {
  j["op"] = c.op;
  j["phase"] = c.phase;
  put(j, "step", c.step);
  j["dir"] = c.dir;
  put(j, "bytes", c.bytes);
  put(j, "seconds", c.seconds);
  if (!c.problems.empty()) j["problems"] = c.problems;
  if (!c.point.empty()) j["point"] = c.point;
  if (!c.files.empty()) j["files"] = c.files;
}

void body_json(json& j, const MemoryLine& m) {
  j["stage"] = m.stage;
  if (!m.device.empty()) j["device"] = m.device;
  put(j, "allocated_bytes", m.allocated_bytes);
  put(j, "reserved_bytes", m.reserved_bytes);
  put(j, "max_allocated_bytes", m.max_allocated_bytes);
  put(j, "total_bytes", m.total_bytes);
  put(j, "rss_bytes", m.rss_bytes);
  if (!m.window.empty()) j["window"] = m.window;
  put(j, "peak_rss_bytes", m.peak_rss_bytes);
  put(j, "peak_allocated_bytes", m.peak_allocated_bytes);
  put(j, "peak_reserved_bytes", m.peak_reserved_bytes);
  put(j, "free_bytes", m.free_bytes);
}

void body_json(json& j, const ProfileLine& p) {
  j["step"] = p.step;
  put(j, "seconds", p.seconds);
  if (!p.profiler.empty()) j["profiler"] = p.profiler;
  put(j, "events", p.events);
  put(j, "comm_s", p.comm_s);
  put(j, "matmul_flops", p.matmul_flops);
  if (!p.file.empty()) j["file"] = p.file;
  if (!p.error.empty()) j["error"] = p.error;
}

void body_json(json& j, const ForkedLine& fl) {
  j["status"] = fl.status;
  j["seconds"] = fl.seconds;
}

void body_json(json& j, const StepMemoryLine& m) {
  j["step"] = m.step;
  j["device"] = m.device;
  j["peak_source"] = m.peak_source;
  j["peak_bytes"] = m.peak_bytes ? json(*m.peak_bytes) : json(nullptr);
  j["baseline_bytes"] = m.baseline_bytes ? json(*m.baseline_bytes) : json(nullptr);
  j["state"] = {{"parameters", m.parameters_bytes}, {"gradients", m.gradients_bytes}, {"optimizer", m.optimizer_bytes}};
}

void body_json(json& j, const ErrorLine& e) {
  j["message"] = e.message;
  if (!e.kind.empty()) j["kind"] = e.kind;
  if (!e.hint.empty()) j["hint"] = e.hint;
}

void body_json(json& j, const ProgramLine& p) {
  j["root"] = p.root;
  j["executable"] = p.executable;
  j["sources"] = p.sources;
  j["sys_path"] = p.sys_path;
  if (!p.distributions_error.empty()) {
    j["distributions"] = {{"error", p.distributions_error}};
    return;
  }
  j["distributions"] = json::array();
  for (const auto& d : p.distributions)
    j["distributions"].push_back({{"name", d.name}, {"version", d.version}, {"dist_info", d.dist_info}});
}

void body_json(json& j, const StageLine& s) {
  j["stage"] = s.stage;
  j["phase"] = s.phase;
  if (!s.status.empty()) j["status"] = s.status;
  put(j, "seconds", s.seconds);
}

}  // namespace

const char* type_of(const Body& b) {
  static constexpr const char* kTypes[] = {"hello",       "step",  "eval",    "digests", "checkpoint", "memory",
                                           "step_memory", "error", "program", "stage",   "profile",    "forked"};
  static_assert(std::size(kTypes) == std::variant_size_v<Body>, "a type name per body");
  return kTypes[b.index()];
}

Event line(Body b, int rank) {
  Event e;
  e.type = type_of(b);
  e.rank = rank;
  e.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  e.body = std::move(b);
  return e;
}

nlohmann::json to_json(const Event& e) {
  json j = {{"type", type_of(e.body)}, {"rank", e.rank}, {"time", e.time}};
  std::visit([&](const auto& b) { body_json(j, b); }, e.body);
  return j;
}

const char* role_name(Role r) {
  switch (r) {
    case Role::kReference: return "reference";
    case Role::kResume: return "resume";
    default: return "probe";
  }
}

nlohmann::json to_json(const Spec& s) {
  json j = {{"protocol", kProtocol},
            {"role", role_name(s.role)},
            {"save_at", s.save_at},
            {"stop_at", s.stop_at},
            {"restore", nullptr},
            {"seed", s.seed},
            {"deterministic", s.deterministic},
            {"digests_every", s.digests_every},
            {"kill_in_save", nullptr}};
  // Paths keep their bytes: printable text, and the exact bytes in "<key>_hex" when that is not UTF-8.
  set_path_field(j, "run_dir", s.run_dir);
  set_path_field(j, "checkpoint_dir", s.checkpoint_dir);
  set_path_field(j, "events", s.events);
  if (s.restore) set_path_field(j, "restore", *s.restore);
  if (s.kill_in_save) j["kill_in_save"] = *s.kill_in_save;
  if (s.probe) j["probe"] = {{"micro_batch", s.probe->first}, {"seq_len", s.probe->second}};
  if (s.start_latest) j["start_from"] = "latest";
  if (s.reshard) j["reshard"] = {{"from", s.reshard->first}, {"to", s.reshard->second}};
  if (s.profile_step) j["profile_step"] = *s.profile_step;
  if (s.precision_reference) j["precision_reference"] = true;
  if (!s.probe_more.empty()) {
    j["probe_more"] = json::array();
    for (const auto& pt : s.probe_more)
      j["probe_more"].push_back({{"micro_batch", pt.micro_batch}, {"seq_len", pt.seq_len}, {"spec", pt.spec}});
  }
  return j;
}

namespace {

// One spec key's check: appends "<key> is <value>, expected <what>" when `ok` fails.
struct SpecCheck {
  const json& d;
  std::vector<std::string>& problems;
  template <typename Ok>
  void operator()(const char* key, Ok ok, const char* expected) const {
    if (d.contains(key) && !ok(d[key]))
      problems.push_back(std::string("'") + key + "' is " + dump_json(d[key]) + ", expected " + expected);
  }
};

// An integer that fits a step count (int64) and is at least `lo`.
bool int_from(const json& v, std::int64_t lo) {
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
           static_cast<std::int64_t>(v.get<std::uint64_t>()) >= lo;
  return v.is_number_integer() && v.get<std::int64_t>() >= lo;
}
bool positive_int(const json& v) { return int_from(v, 1); }
bool is_path_hex(const json& v) {
  if (!v.is_string()) return false;
  const auto& h = v.get_ref<const std::string&>();
  return !h.empty() && h.size() % 2 == 0 && h.find_first_not_of("0123456789abcdef") == std::string::npos;
}
bool seed_int(const json& v) { return v.is_number_unsigned() || int_from(v, 0); }  // any uint64

// probe_more: each point's shape and its spec, a file name beside the spec (no path).
bool probe_points_ok(const json& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& pt) {
           if (!pt.is_object() || pt.size() != 3 || !pt.contains("micro_batch") || !pt.contains("seq_len") ||
               !pt.contains("spec"))
             return false;
           const json& f = pt["spec"];
           return positive_int(pt["micro_batch"]) && positive_int(pt["seq_len"]) && f.is_string() && f != "" &&
                  f != "." && f != ".." && f.get<std::string>().find('/') == std::string::npos;
         });
}

// The keys that must agree with each other (checked once each is well formed).
void spec_relations(const json& d, std::vector<std::string>& problems) {
  const json kill = d.value("kill_in_save", json());
  if (!kill.is_null() && std::find(d["save_at"].begin(), d["save_at"].end(), kill) == d["save_at"].end())
    problems.push_back("'kill_in_save' is " + kill.dump() + " but save_at " + d["save_at"].dump() +
                       " does not hold it");
  const bool probe = d.contains("probe") && !d["probe"].is_null();
  if (d.contains("probe_more") && !d["probe_more"].empty() && d["role"] == "reference")
    problems.push_back(
        "'probe_more' is given but role is \"reference\" (the memory probe's points are forked by "
        "worker B or by a probe)");
  if ((d["role"] == "probe") != probe)
    problems.push_back("'probe' is given exactly when role is \"probe\" (role " + d["role"].dump() + ")");
  if (d.contains("precision_reference") && d["role"] != "resume")
    problems.push_back("'precision_reference' is given but role is " + d["role"].dump() +
                       " (only a resume runs the fp32 reference)");
  if (d.contains("restore_hex") && d["restore"].is_null())
    problems.push_back("'restore_hex' is given but 'restore' is null");
  if (d["role"] != "resume" && !d["restore"].is_null())
    problems.push_back("'restore' is " + dump_json(d["restore"]) + " but role is " + d["role"].dump() +
                       " (only a resume restores)");
}

std::vector<std::string> spec_problems(const json& d) {
  static const std::set<std::string> kRequired = {"protocol", "role",    "run_dir", "checkpoint_dir", "save_at",
                                                  "stop_at",  "restore", "seed",    "deterministic",  "events"};
  static const std::set<std::string> kOptional = {
      "digests_every", "kill_in_save", "probe",   "start_from",   "run_dir_hex", "checkpoint_dir_hex",
      "events_hex",    "restore_hex",  "reshard", "profile_step", "probe_more",  "precision_reference"};
  std::vector<std::string> problems;
  for (const auto& [k, v] : d.items())
    if (!kRequired.count(k) && !kOptional.count(k)) problems.push_back("unknown key '" + printable(k) + "'");
  for (const auto& k : kRequired)
    if (!d.contains(k)) problems.push_back("missing key '" + k + "'");
  const SpecCheck check{d, problems};
  check(
      "protocol", [](const json& v) { return v == kProtocol; }, "1");
  check(
      "role", [](const json& v) { return v == "reference" || v == "resume" || v == "probe"; },
      "\"reference\", \"resume\" or \"probe\"");
  for (const char* k : {"run_dir", "checkpoint_dir", "events"})
    check(
        k, [](const json& v) { return v.is_string() && !v.get<std::string>().empty(); }, "a non-empty string");
  check(
      "save_at", [](const json& v) { return v.is_array() && std::all_of(v.begin(), v.end(), positive_int); },
      "a list of integers >= 1");
  check("stop_at", positive_int, "an integer >= 1");
  check(
      "restore", [](const json& v) { return v.is_null() || (v.is_string() && !v.get<std::string>().empty()); },
      "null or a step directory");
  check("seed", seed_int, "an integer >= 0");
  check(
      "deterministic", [](const json& v) { return v.is_boolean(); }, "true or false");
  check(
      "digests_every", [](const json& v) { return int_from(v, 0); }, "an integer >= 0");
  check(
      "kill_in_save", [](const json& v) { return v.is_null() || positive_int(v); }, "null or an integer >= 1");
  check("profile_step", positive_int, "an integer >= 1");
  check(
      "precision_reference", [](const json& v) { return v == true; }, "true");
  check("probe_more", probe_points_ok,
        "a list of {\"micro_batch\": int >= 1, \"seq_len\": int >= 1, \"spec\": a file name}");
  check(
      "probe",
      [](const json& v) {
        return v.is_object() && v.size() == 2 && v.contains("micro_batch") && v.contains("seq_len") &&
               positive_int(v["micro_batch"]) && positive_int(v["seq_len"]);
      },
      "an object {\"micro_batch\": int >= 1, \"seq_len\": int >= 1}");
  check(
      "start_from", [](const json& v) { return v == "init" || v == "latest"; }, "\"init\" or \"latest\"");
  check(
      "reshard",
      [](const json& v) {
        return v.is_object() && v.size() == 2 && v.contains("from") && v.contains("to") && positive_int(v.at("from")) &&
               positive_int(v.at("to"));
      },
      "an object {\"from\": int >= 1, \"to\": int >= 1}");
  for (const char* k : {"run_dir_hex", "checkpoint_dir_hex", "events_hex", "restore_hex"})
    check(k, is_path_hex, "a path's bytes in lowercase hex");
  if (!problems.empty()) return problems;
  spec_relations(d, problems);
  return problems;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

Spec spec_from_json(const json& d, const std::string& where) {
  const char* hint = "the spec is written by the anchor that starts the worker; run the worker through that anchor";
  if (!d.is_object())
    throw Error(ErrorKind::kRuntime, "pilot spec " + printable(where) + " is not a JSON object", hint);
  const auto problems = spec_problems(d);
  if (!problems.empty())
    throw Error(ErrorKind::kRuntime,
                "pilot spec " + printable(where) + ": " + std::to_string(problems.size()) + " problem" +
                    (problems.size() > 1 ? "s: " : ": ") + join(problems, "; "),
                hint);
  Spec s;
  const std::string role = d["role"];
  s.role = role == "reference" ? Role::kReference : role == "resume" ? Role::kResume : Role::kProbe;
  try {
    s.run_dir = path_field(d, "run_dir");
    s.checkpoint_dir = path_field(d, "checkpoint_dir");
    s.events = path_field(d, "events");
    if (!d["restore"].is_null()) s.restore = path_field(d, "restore");
  } catch (const Error& e) {  // a <key>_hex that is not hex
    throw Error(ErrorKind::kRuntime, "pilot spec " + printable(where) + ": " + e.what(), hint);
  }
  s.save_at = d["save_at"].get<std::vector<std::int64_t>>();
  s.stop_at = d["stop_at"];
  s.seed = d["seed"];
  s.deterministic = d["deterministic"];
  s.digests_every = d.value("digests_every", std::int64_t{0});
  if (d.contains("kill_in_save") && !d["kill_in_save"].is_null()) s.kill_in_save = d["kill_in_save"];
  if (d.contains("probe") && !d["probe"].is_null()) s.probe = {{d["probe"]["micro_batch"], d["probe"]["seq_len"]}};
  s.start_latest = d.value("start_from", std::string("init")) == "latest";
  if (const auto it = d.find("reshard"); it != d.end())
    s.reshard = {{it->at("from").get<std::int64_t>(), it->at("to").get<std::int64_t>()}};
  if (const auto it = d.find("profile_step"); it != d.end()) s.profile_step = it->get<std::int64_t>();
  s.precision_reference = d.contains("precision_reference");
  if (const auto it = d.find("probe_more"); it != d.end())
    for (const auto& pt : *it)
      s.probe_more.push_back({pt.at("micro_batch").get<std::int64_t>(), pt.at("seq_len").get<std::int64_t>(),
                              pt.at("spec").get<std::string>()});
  return s;
}

Spec read_spec(const std::string& path) {
  json d;
  try {
    d = parse_json(fs::read_file(path));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kRuntime, "pilot spec " + printable(path) + " is not JSON: " + e.what(),
                "the spec is written by the anchor that starts the worker; run the worker through that anchor");
  }
  Spec s = spec_from_json(d, path);
  // Relative paths are the spec file's directory's, as the helper takes them.
  const std::filesystem::path base = std::filesystem::absolute(path).parent_path();
  for (std::string* p : {&s.run_dir, &s.checkpoint_dir, &s.events})
    if (*p != kEventsOnStdout && (*p)[0] != '/') *p = (base / *p).string();
  if (s.restore && (*s.restore)[0] != '/') s.restore = (base / *s.restore).string();
  return s;
}

bool Number::operator==(const Number& o) const {
  if (known != o.known) return false;
  if (!known) return true;
  // The same bits (a NaN equals itself, though the parser makes NaN null), or
  // equal values: +0 == -0 is not a difference. The bits are compared as an
  // integer, not by memcmp: a double's object representation is not unique.
  static_assert(sizeof(std::uint64_t) == sizeof value, "a double is 64 bits");
  std::uint64_t bits = 0, other_bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  std::memcpy(&other_bits, &o.value, sizeof o.value);
  return bits == other_bits || value == o.value;
}

std::string Number::text() const {
  if (!known) return "null";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os << std::setprecision(17) << value;
  return os.str();
}

const std::string* DigestsLine::find(const std::string& name) const {
  for (const auto& [n, d] : components)
    if (n == name) return &d;
  return nullptr;
}

Event parse_event(const std::string& line) {
  json j;
  try {
    j = parse_json(line);
  } catch (const json::exception& e) {
    throw bad(std::string("not a JSON line: ") + e.what());
  }
  if (!j.is_object()) throw bad("a line is " + std::string(j.type_name()) + ", not a JSON object");
  Event e;
  try {
    e.type = JsonFields(j, "").str("type");
    const JsonFields f(j, "\"" + printable(e.type) + "\"");
    const std::int64_t rank = f.integer("rank");
    if (rank < 0 || rank > 1'000'000)
      throw bad("\"" + printable(e.type) + "\".rank is " + std::to_string(rank) + ", not a rank");
    e.rank = static_cast<int>(rank);
    e.time = f.number("time");
    e.body = parse_body(e.type, f);
  } catch (const std::invalid_argument& x) {
    throw bad(x.what());
  }
  e.raw = std::move(j);
  return e;
}

std::vector<Event> EventReader::poll() {
  std::vector<Event> out;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0 && errno == ENOENT) return out;  // not written yet
  auto fd = fs::open_regular(path_, &st, {"the program's events file", ErrorKind::kRuntime, ""});
  if (static_cast<std::uint64_t>(st.st_size) < offset_)
    throw bad(path_ + " shrank while the program ran (from " + std::to_string(offset_) + " to " +
              std::to_string(st.st_size) + " bytes)");
  if (::lseek(fd.get(), static_cast<off_t>(offset_), SEEK_SET) < 0) throw io_error("seek", path_, errno);
  // What is there now, no more: a program that never stops writing must not keep the supervisor here.
  const std::uint64_t end = static_cast<std::uint64_t>(st.st_size);
  if (end > max_bytes_)
    throw bad(path_ + ": " + std::to_string(end) + " bytes, more than the " + std::to_string(max_bytes_ >> 20) +
              " MiB a pilot of this length writes; anchor_pilot writes a few lines per step: does the program call "
              "it in an inner loop, or write to the file itself?");
  char buf[65536];
  while (offset_ < end) {
    const ssize_t n =
        ::read(fd.get(), buf, static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, end - offset_)));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("read", path_, errno);
    }
    if (n == 0) break;
    offset_ += static_cast<std::uint64_t>(n);
    partial_.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0, nl;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      if (++line_no_ > max_lines_)
        throw bad(path_ + ": more than " + std::to_string(max_lines_) +
                  " lines; anchor_pilot writes a few per step: does the program call it in an inner loop, or write "
                  "to the file itself?");
      const std::string line = partial_.substr(start, nl - start);
      start = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        out.push_back(parse_event(line));
      } catch (const Error& e) {
        throw Error(e.kind(), path_ + ":" + std::to_string(line_no_) + ": " + e.what(), e.hint());
      }
    }
    partial_.erase(0, start);
    if (partial_.size() > kMaxLine)
      throw bad(path_ + ":" + std::to_string(line_no_ + 1) + ": a line longer than " + std::to_string(kMaxLine >> 20) +
                " MiB");
  }
  return out;
}

void WorkerLog::add(const Event& e) {
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Hello>)
          hello = b;
        else if constexpr (std::is_same_v<T, StepLine>)
          steps.push_back(b);
        else if constexpr (std::is_same_v<T, EvalLine>)
          evals.push_back(b);
        else if constexpr (std::is_same_v<T, DigestsLine>)
          digests.push_back(b);
        else if constexpr (std::is_same_v<T, CheckpointLine>)
          checkpoints.push_back(b);
        else if constexpr (std::is_same_v<T, MemoryLine>)
          memory.push_back(b);
        else if constexpr (std::is_same_v<T, StepMemoryLine>)
          step_memory = b;
        else if constexpr (std::is_same_v<T, ErrorLine>)
          errors.push_back(b);
        else if constexpr (std::is_same_v<T, ProgramLine>)
          program = b;
        else if constexpr (std::is_same_v<T, ProfileLine>)
          profile = b;
        else if constexpr (std::is_same_v<T, ForkedLine>)
          forked = b;
      },
      e.body);
}

const DigestsLine* WorkerLog::digests_at(const std::string& when, std::int64_t step) const {
  const DigestsLine* found = nullptr;
  for (const auto& d : digests)
    if (d.when == when && d.step && *d.step == step) found = &d;
  return found;
}

const CheckpointLine* WorkerLog::checkpoint(const std::string& op, const std::string& phase, std::int64_t step) const {
  const CheckpointLine* found = nullptr;
  for (const auto& c : checkpoints)
    if (c.op == op && c.phase == phase && c.step && *c.step == step) found = &c;
  return found;
}

namespace {

// The first component whose digest differs (in kComponentOrder, then the rest
// by name), or "" when they are all equal.
Check compare_state(const std::string& name, const DigestsLine* ref, const DigestsLine* res,
                    const std::string& ref_what, const std::string& res_what, bool observed = false) {
  Check c{name, false, "", ""};
  if (!ref || !res) {
    c.detail = std::string(!ref ? "the reference reports no digests " + ref_what
                                : "the resumed run reports no digests " + res_what) +
               (observed ? " (hint: wrap the program's save in `with pilot.saving(step):` at the steps "
                           "pilot.should_save(step) names, and call pilot.restored(step) after its load)"
                         : " (hint: the program must save through anchor_pilot: Pilot.maybe_save(step) at the steps "
                           "anchor asks)");
    return c;
  }
  std::vector<std::string> names;
  for (const char* n : kComponentOrder) names.emplace_back(n);
  std::vector<std::string> rest;
  for (const auto* line : {ref, res})
    for (const auto& [n, _] : line->components)
      if (std::find(names.begin(), names.end(), n) == names.end() &&
          std::find(rest.begin(), rest.end(), n) == rest.end())
        rest.push_back(n);
  std::sort(rest.begin(), rest.end());
  names.insert(names.end(), rest.begin(), rest.end());
  for (const auto& n : names) {
    const std::string* a = ref->find(n);
    const std::string* b = res->find(n);
    if (!a && !b) continue;
    if (a && b && *a == *b) continue;
    const std::string was = a ? a->substr(0, 12) : std::string("absent"), is = b ? b->substr(0, 12) : "absent";
    if (!observed) {
      c.component = n;
      c.detail = "component '" + n + "' differs: reference " + (a ? a->substr(0, 16) : std::string("absent")) +
                 ", resumed " + (b ? b->substr(0, 16) : std::string("absent"));
      return c;
    }
    // The program's own checkpoint: every component it does not bring back, in its terms.
    if (c.component.empty()) c.component = n;
    c.detail += (c.detail.empty() ? "" : "; ") + component_words(n) + ": " + res_what + " its state differs from " +
                ref_what + " (" + was + " saved, " + is + " now)";
  }
  if (!c.component.empty()) return c;
  c.ok = true;
  c.detail = std::to_string(ref->components.size()) + " components equal";
  return c;
}

// Numbers as the helper reports them: unknown (null) equals only unknown.
bool close_enough(const Number& a, const Number& b, double tol) {
  if (!a.known || !b.known) return a == b;
  return within_tolerance(a.value, b.value, tol);
}

// Why the resumed run did not restore the step the reference saved: another step (`got`), or none (-1).
std::string wrong_restore(std::int64_t got, std::int64_t save_step, bool observed) {
  if (got >= 0)
    return "the resumed run restored step " + std::to_string(got) + ", not step " + std::to_string(save_step) +
           " (the one the reference saved before its kill)";
  if (!observed) return "the resumed run reports no restore (hint: call Pilot.restore() before the loop)";
  return "the resumed run started from scratch: it reports no restore, although the reference's save of step " +
         std::to_string(save_step) +
         " finished (hint: does your resume look in pilot.checkpoint_dir? A framework resumes only from what it is "
         "given: Trainer.train(resume_from_checkpoint=...), Trainer.fit(ckpt_path=...), Accelerator.load_state(...); "
         "call pilot.restored(step) after your own load)";
}

// The restored state equal, the RNG streams not at the first resumed step's start: drawn from in between.
void check_first_step_rng(Verdict& v, const std::map<std::int64_t, const StepLine*>& ref_steps, const WorkerLog& res,
                          std::int64_t save_step) {
  for (const auto& s : res.steps) {
    if (s.step <= save_step) continue;
    const auto it = ref_steps.find(s.step);
    const bool same_batch = it != ref_steps.end() && s.batch == it->second->batch;
    if (it != ref_steps.end() && same_batch && !s.rng.empty() && !it->second->rng.empty() && s.rng != it->second->rng) {
      v.add({"rng at step " + std::to_string(s.step), false,
             "the state came back equal, but the random generators differ at the start of step " +
                 std::to_string(s.step) + " (" + s.rng.substr(0, 12) + ", reference " + it->second->rng.substr(0, 12) +
                 "): something drew from them between the restore and this step. A DataLoader iterator made "
                 "after the restore draws its base seed from torch's global generator: give the DataLoader "
                 "generator=torch.Generator(), or make the iterator before restoring",
             "rng"});
      if (v.cause.empty()) v.cause.push_back("rng");
    }
    return;  // the first resumed step only: after it, every difference follows from the first
  }
}

// The input of the first resumed step whose batch differs (both runs gave theirs): the data cursor.
void check_first_batch(Verdict& v, const std::map<std::int64_t, const StepLine*>& ref_steps, const WorkerLog& res,
                       std::int64_t save_step) {
  for (const auto& s : res.steps) {
    const auto it = ref_steps.find(s.step);
    if (s.step <= save_step || it == ref_steps.end() || s.batch.empty() || it->second->batch.empty()) continue;
    if (s.batch == it->second->batch) continue;
    v.add({"batch at step " + std::to_string(s.step), false,
           "the resumed run trains on other data than the reference at this step (batch " + s.batch.substr(0, 12) +
               ", reference " + it->second->batch.substr(0, 12) +
               "): the data cursor is not where it was (is the loader's position saved and restored, and its "
               "iterator made the same way?)",
           "data"});
    if (v.cause.empty()) v.cause.push_back("data");
    return;
  }
}

}  // namespace

std::string component_words(const std::string& component) {
  static const std::map<std::string, std::string> words = {{"model", "the model"},
                                                           {"optimizer", "the optimizer"},
                                                           {"scheduler", "the scheduler"},
                                                           {"scaler", "the grad scaler"},
                                                           {"data", "the data cursor"},
                                                           {"rng", "the random generators"},
                                                           {"rng.torch", "torch's CPU random generator"},
                                                           {"rng.cuda", "the CUDA random generators"},
                                                           {"rng.python", "Python's random"},
                                                           {"rng.numpy", "NumPy's global random generator"}};
  const auto it = words.find(component);
  return it != words.end() ? it->second : "'" + printable(component) + "'";
}

namespace {

// The steps of `v`, and whether the resumed run restored `save_step` (its last restore line); a failed
// "restored step" check, cause checkpoint, when it did not.
// The program's evaluate() (Pilot(evaluate=...)) in the reference's save of
// `save_step` and right after the resume restored it: the same state gives
// the same validation loss (bitwise, or within the tolerance). Nothing to
// check when neither ran it.
void check_eval_across_restore(Verdict& v, const WorkerLog& ref, const WorkerLog& res, std::int64_t save_step,
                               double tolerance) {
  const auto find = [&](const WorkerLog& log, const char* when) -> const EvalLine* {
    const EvalLine* found = nullptr;
    for (const auto& e : log.evals)
      if (e.when == when && e.step == save_step) found = &e;
    return found;
  };
  const EvalLine* before = find(ref, "before_save");
  const EvalLine* after = find(res, "after_restore");
  if (!before && !after) return;
  const std::string k = std::to_string(save_step);
  Check c{"eval after restore", false, "", "eval"};
  if (!before) {
    c.detail = "the resumed run evaluated after restoring step " + k + ", the reference did not in its save of it";
  } else if (!after) {
    c.detail = "the reference evaluated in its save of step " + k +
               ", the resumed run not after restoring it (did it restore through the helper, Pilot.restore() or "
               "pilot.restored(step)?)";
  } else {
    c.ok = close_enough(before->loss, after->loss, tolerance);
    c.detail = c.ok ? "equal (" + before->loss.text() + ")"
                    : "before the save " + before->loss.text() + ", after the restore " + after->loss.text() +
                          ": the evaluation reads something the restore did not bring back (the model's weights or "
                          "buffers, or state of its own such as a validation data iterator)";
  }
  if (!c.ok && v.cause.empty()) v.cause.push_back("eval");
  v.add(c);
}

bool restored_step(Verdict& v, const WorkerLog& res, std::int64_t save_step, std::int64_t last_step, bool observed) {
  v.saved_step = save_step;
  v.last_step = last_step;
  const CheckpointLine* restored = nullptr;
  for (const auto& c : res.checkpoints)
    if (c.op == "restore" && c.phase == "end") restored = &c;
  v.restored_step = restored && restored->step ? *restored->step : -1;
  if (v.restored_step == save_step) return true;
  v.add({"restored step", false, wrong_restore(restored ? v.restored_step : -1, save_step, observed), "checkpoint"});
  v.cause.push_back("checkpoint");
  return false;
}

}  // namespace

Verdict compare(const WorkerLog& ref, const WorkerLog& res, std::int64_t save_step, std::int64_t last_step,
                double tolerance, bool observed) {
  Verdict v(tolerance);
  // 1. The state right after the restore.
  if (!restored_step(v, res, save_step, last_step, observed)) return v;
  v.add({"restored step", true, "step " + std::to_string(save_step), ""});
  const std::string saved = (observed ? "your save of step " : "at its save of step ") + std::to_string(save_step);
  Check st = compare_state("restored state", ref.digests_at("save", save_step), res.digests_at("restore", save_step),
                           saved, observed ? "after your load" : "after its restore", observed);
  if (!st.ok) v.cause.push_back(st.component.empty() ? "state" : st.component);
  v.add(st);
  check_eval_across_restore(v, ref, res, save_step, tolerance);
  // 2. Every resumed step's loss.
  std::map<std::int64_t, const StepLine*> ref_steps;
  for (const auto& s : ref.steps) ref_steps[s.step] = &s;
  if (st.ok) check_first_step_rng(v, ref_steps, res, save_step);
  check_first_batch(v, ref_steps, res, save_step);
  std::int64_t seen = 0;
  std::set<std::int64_t> resumed_steps;
  bool lr_named = false;
  for (const auto& s : res.steps) {
    if (s.step <= save_step) continue;
    ++seen;
    const std::string name = "loss at step " + std::to_string(s.step);
    if (!resumed_steps.insert(s.step).second) {
      v.add({name, false, "the resumed run reports step " + std::to_string(s.step) + " twice", "steps"});
      if (v.cause.empty()) v.cause.push_back("steps");
      continue;
    }
    auto it = ref_steps.find(s.step);
    // The learning rate, before the loss: one that differs is the scheduler's (its state or its step count).
    if (!lr_named && it != ref_steps.end() && it->second->lr.known && s.lr.known &&
        !close_enough(it->second->lr, s.lr, tolerance)) {
      lr_named = true;
      v.add({"lr at step " + std::to_string(s.step), false,
             "the learning rate differs (reference " + it->second->lr.text() + ", resumed " + s.lr.text() +
                 "): the scheduler did not come back as it was. " +
                 (observed ? "Save and load its state_dict() in your checkpoint, and give it to the Pilot "
                             "(scheduler=...) so that anchor compares it"
                           : "Give it to the Pilot (scheduler=...): the helper then saves and restores it"),
             "scheduler"});
      if (v.cause.empty()) v.cause.push_back("scheduler");
    }
    Check c{name, false, "", "loss"};
    if (it == ref_steps.end()) {
      c.detail = "the reference reports no step " + std::to_string(s.step);
    } else {
      c.ok = close_enough(it->second->loss, s.loss, tolerance);
      c.detail = "reference " + it->second->loss.text() + ", resumed " + s.loss.text();
    }
    if (!c.ok && v.cause.empty()) v.cause.push_back("loss");
    v.add(c);
  }
  if (seen != last_step - save_step) {
    v.add({"resumed steps", false,
           "the resumed run reports " + std::to_string(seen) + " steps after step " + std::to_string(save_step) +
               ", expected " + std::to_string(last_step - save_step),
           "steps"});
    if (v.cause.empty()) v.cause.push_back("steps");
  }
  // 3. The state at the last step.
  Check last =
      compare_state("state at step " + std::to_string(last_step), ref.digests_at("save", last_step),
                    res.digests_at("save", last_step), "at its (killed) save of step " + std::to_string(last_step),
                    "at its save of step " + std::to_string(last_step));
  if (!last.ok && tolerance > 0 && !last.component.empty()) {
    // Within a tolerance the state after R steps is not expected to be bitwise the same: said, not failed.
    last.ok = true;
    last.detail += " (tolerance mode: the losses decide)";
  }
  const std::string last_cause = last.component.empty() ? "state" : last.component;
  if (!last.ok && std::find(v.cause.begin(), v.cause.end(), last_cause) == v.cause.end()) v.cause.push_back(last_cause);
  v.add(last);
  return v;
}

namespace {

// A digests line without each rank's own components (its RNG streams and data cursor).
std::optional<DigestsLine> global_part(const DigestsLine* line, std::vector<std::string>& left_out) {
  if (!line) return std::nullopt;
  DigestsLine out = *line;
  out.components.clear();
  for (const auto& c : line->components) {
    if (c.first == "data" || c.first.rfind("rng", 0) == 0) {
      if (std::find(left_out.begin(), left_out.end(), c.first) == left_out.end()) left_out.push_back(c.first);
      continue;
    }
    out.components.push_back(c);
  }
  return out;
}

}  // namespace

Verdict compare_resharded(const WorkerLog& ref, const WorkerLog& res, std::int64_t save_step, std::int64_t last_step,
                          std::int64_t from_world, std::int64_t to_world) {
  Verdict v(0);
  v.mode = "resharded";
  if (!restored_step(v, res, save_step, last_step, true)) return v;
  const std::string worlds = std::to_string(from_world) + " to " + std::to_string(to_world) + " ranks";
  v.add({"restored step", true, "step " + std::to_string(save_step) + ", resharded from " + worlds, ""});
  std::vector<std::string> per_rank;
  const auto want = global_part(ref.digests_at("save", save_step), per_rank);
  const auto got = global_part(res.digests_at("restore", save_step), per_rank);
  Check st = compare_state("restored state", want ? &*want : nullptr, got ? &*got : nullptr,
                           "your save of step " + std::to_string(save_step), "after your load", true);
  if (st.ok) st.detail += " in full (each sharded tensor gathered), resharded from " + worlds;
  std::string skipped;
  for (const auto& n : per_rank) skipped += (skipped.empty() ? "" : ", ") + n;
  if (!per_rank.empty())
    st.detail += "; not compared: " + skipped + " (each rank's own, and the ranks are not the same ranks)";
  if (!st.ok) v.cause.push_back(st.component.empty() ? "state" : st.component);
  v.add(st);
  // The steps after the reshard: each reported once, with a finite loss; shown beside the reference's.
  std::map<std::int64_t, const StepLine*> ref_steps;
  for (const auto& s : ref.steps) ref_steps[s.step] = &s;
  std::set<std::int64_t> seen;
  std::string shown, bad;
  for (const auto& s : res.steps) {
    if (s.step <= save_step) continue;
    if (!seen.insert(s.step).second || !s.loss.known || !std::isfinite(s.loss.value))
      bad += (bad.empty() ? "step " : ", step ") + std::to_string(s.step);
    const auto it = ref_steps.find(s.step);
    shown += (shown.empty() ? "" : "; ") + std::to_string(s.step) + ": " + s.loss.text() +
             (it == ref_steps.end() ? "" : " (reference " + it->second->loss.text() + ")");
  }
  const bool all = static_cast<std::int64_t>(seen.size()) == last_step - save_step;
  Check steps{"resumed steps", all && bad.empty(), "", "steps"};
  steps.detail = !bad.empty() ? "the resumed run reports " + bad + " twice or without a finite loss"
                 : !all       ? "the resumed run reports " + std::to_string(seen.size()) + " steps after step " +
                              std::to_string(save_step) + ", expected " + std::to_string(last_step - save_step)
                        : "losses " + shown + ": not compared, the data is split over another number of ranks";
  if (!steps.ok && v.cause.empty()) v.cause.push_back("steps");
  v.add(steps);
  return v;
}

}  // namespace anchor::protocol
