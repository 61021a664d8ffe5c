#include "anchor/config/config.hpp"
#include "anchor/config/diff.hpp"
#include "anchor/common/utf8.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "config/schema.hpp"

namespace anchor::config {
namespace {

namespace stdfs = std::filesystem;
using schema::Field;

const char* const kSetFile = "--set";

struct Loc {
  std::string file;
  int line = 0;  // 1-based; 0 = no position
  int column = 0;
};

Loc at(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string last_part(const std::string& dotted) {
  auto dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

std::string parent_of(const std::string& dotted) {
  auto dot = dotted.rfind('.');
  return dot == std::string::npos ? "" : dotted.substr(0, dot);
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// The closest known key to `name` written under `section`: first a sibling
// with a similar name (a typo), then a key anywhere whose last part is
// similar (right name, wrong place: train.lr -> train.optimizer.lr).
std::string suggest(const std::string& section, const std::string& name) {
  const std::size_t limit = std::max<std::size_t>(1, name.size() / 3);
  std::string best;
  std::size_t best_d = limit + 1;
  for (const auto& sib : schema::children(section)) {
    std::size_t d = edit_distance(lower(name), lower(sib));
    if (d < best_d) {
      best_d = d;
      best = section.empty() ? sib : section + "." + sib;
    }
  }
  if (!best.empty()) return best;
  for (const auto& f : schema::fields()) {
    std::size_t d = edit_distance(lower(name), lower(last_part(f.key)));
    if (d < best_d) {
      best_d = d;
      best = f.key;
    }
  }
  return best;
}

std::string unknown_key_message(const std::string& section, const std::string& name) {
  std::string msg = "unknown key '" + name + "'";
  std::string s = suggest(section, name);
  if (!s.empty()) msg += " (did you mean '" + s + "'?)";
  msg += "; " + (section.empty() ? std::string("the top level") : "'" + section + "'") +
         " accepts: " + join(schema::children(section));
  return msg;
}

std::string describe_node(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  return "nothing";
}

// Counts documents without building them: where the second one starts.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ == 2) second_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  int documents() const { return documents_; }
  const YAML::Mark& second() const { return second_; }

 private:
  int documents_ = 0;
  YAML::Mark second_;
};

// The first document, and the mark of a second one if there is one. Not
// YAML::LoadAll: on some malformed input (found by fuzz_config, a stray
// non-UTF-8 byte in a comment) yaml-cpp 0.7's LoadAll never stops producing
// documents until memory runs out. Two documents are all we need to know about.
std::pair<YAML::Node, std::optional<YAML::Mark>> load_first_document(const std::string& text) {
  YAML::Node first = YAML::Load(text);
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (int i = 0; i < 2 && parser.HandleNextDocument(counter); ++i) {
  }
  if (counter.documents() >= 2) return {first, counter.second()};
  return {first, std::nullopt};
}

// Loads one config: the file's tree, then the overrides, then the checks that
// need the whole config. Problems are collected, never thrown one by one.
class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  void read_yaml(const std::string& text) {
    YAML::Node root;
    std::optional<YAML::Mark> second_document;
    try {
      std::tie(root, second_document) = load_first_document(text);
    } catch (const YAML::ParserException& e) {
      add(at(file_, e.mark), "", "YAML syntax error: " + e.msg);
      unreadable_ = true;
      return;
    } catch (const YAML::Exception& e) {
      add(at(file_, e.mark), "", "YAML error: " + e.msg);
      unreadable_ = true;
      return;
    }
    if (!root.IsDefined() || root.IsNull()) return;  // empty file: defaults (and missing keys)
    if (second_document) add(at(file_, *second_document), "", "more than one YAML document; a config is one document");
    if (!root.IsMap()) {
      add(at(file_, root.Mark()), "",
          "expected a mapping of sections (" + join(schema::children("")) + "), got " + describe_node(root));
      unreadable_ = true;  // nothing else can be checked meaningfully
      return;
    }
    walk(root, "");
  }

  void apply_override(const std::string& spec) {
    const Loc loc{kSetFile, 0, 0};
    auto eq = spec.find('=');
    if (eq == std::string::npos) {
      add(loc, trim(spec), "expected key=value, e.g. --set train.micro_batch=8");
      return;
    }
    const std::string key = trim(spec.substr(0, eq));
    const std::string text = spec.substr(eq + 1);
    const Field* f = schema::find(key);
    if (!f) {
      if (schema::is_section(key)) {
        add(loc, key, "is a section; set one of its keys: " + join(schema::children(key)));
      } else {
        std::string section = parent_of(key);
        if (!section.empty() && !schema::is_section(section)) section = "";
        std::string msg = "unknown key";
        std::string s = suggest(section, last_part(key));
        if (!s.empty()) msg += " (did you mean '" + s + "'?)";
        msg += "; the keys are listed in docs/config.md and by `anchor config dump`";
        add(loc, key, msg);
      }
      return;
    }
    if (trim(text).empty() && (f->type() == schema::Type::kString || f->type() == schema::Type::kStringList)) {
      // An empty value gets the checks '' or [] would get from the file:
      // `--set run.output_dir=` must not put run directories at /.
      where_[f->key] = loc;
      if (std::string err = schema::assign_empty(*f, c_); !err.empty()) {
        add(loc, f->key, err + " (an empty --set value empties a key only where empty is allowed)");
        bad_.insert(f->key);
      } else {
        bad_.erase(f->key);  // as set_leaf: a good override replaces a bad file value
      }
      return;
    }
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      add(loc, key, "cannot parse the value '" + text + "' as YAML: " + e.msg);
      bad_.insert(key);
      return;
    }
    set_leaf(*f, loc, value, /*from_file=*/false);
  }

  // The directory relative paths resolve against comes from outside the
  // YAML (a manifest's config.base_dir for reproduce and the workers): it gets
  // the NUL check every string value gets.
  void check_base_dir(const std::string& base_dir) {
    if (base_dir.find('\0') != std::string::npos)
      add(Loc{file_, 0, 0}, "base_dir",
          "the directory relative paths resolve against contains a NUL byte (\\0): the operating "
          "system would see it cut short there");
  }

  void check_required() {
    if (unreadable_) return;
    // The built-in trainer's data is required; a program reads its own (data.train then only pins
    // files): an empty data.train, refused as it was read, is fine after all.
    const bool program = !c_.program.command.empty() && !bad_.count("program.command");
    if (program && bad_.count("data.train")) {
      problems_.erase(std::remove_if(problems_.begin(), problems_.end(),
                                     [](const Problem& p) {
                                       return p.key == "data.train" && p.message == "must list at least one entry";
                                     }),
                      problems_.end());
      if (std::none_of(problems_.begin(), problems_.end(), [](const Problem& p) { return p.key == "data.train"; }))
        bad_.erase("data.train");
    }
    for (const auto& f : schema::fields()) {
      if (!f.required || where_.count(f.key)) continue;
      if (f.key == "data.train" && program) continue;
      // Point at the enclosing section when it is there.
      Loc loc{file_, 0, 0};
      for (std::string s = parent_of(f.key); !s.empty(); s = parent_of(s)) {
        if (where_.count(s)) {
          loc = where_[s];
          break;
        }
      }
      add(loc, f.key, "missing required key; expected " + schema::type_name(f.type()));
      bad_.insert(f.key);
    }
  }

  // Rules between keys. Each runs only when none of its keys was rejected
  // (a bad value would otherwise show up twice, once as a contradiction).
  void cross_check() {
    if (unreadable_) return;
    const Config& c = c_;
    check_batch_and_seq_len(c);
    check_model_source(c);
    check_length_and_shape(c);
    check_device_and_val(c);
    check_program_env(c);
    check_steps_and_memory(c);
  }

  // Throws ConfigError when anything was found, else returns the config.
  Config finish() {
    // File positions in reading order, then file-level problems without a
    // position, then the overrides (in the order given).
    auto rank = [](const Problem& p) {
      int group = p.file == kSetFile ? 2 : (p.line == 0 ? 1 : 0);
      return std::make_tuple(group, p.line, p.column);
    };
    std::stable_sort(problems_.begin(), problems_.end(),
                     [&](const Problem& a, const Problem& b) { return rank(a) < rank(b); });
    if (!problems_.empty()) throw ConfigError(file_, problems_);
    return c_;
  }

 private:
  // The rules of cross_check, in its order (a conflict's place among equal
  // positions follows it).
  // The batch sizes agree; a sequence fits the model.
  void check_batch_and_seq_len(const Config& c) {
    if (ok({"train.global_batch", "train.micro_batch", "train.grad_accum", "distributed.nproc_per_node"}) &&
        c.train.global_batch != 0) {
      const std::int64_t derived =
          static_cast<std::int64_t>(c.train.micro_batch) * c.train.grad_accum * c.distributed.nproc_per_node;
      if (c.train.global_batch != derived)
        conflict({"train.global_batch", "train.micro_batch", "train.grad_accum", "distributed.nproc_per_node"},
                 "train.global_batch is " + std::to_string(c.train.global_batch) +
                     " but train.micro_batch * train.grad_accum * distributed.nproc_per_node = " +
                     std::to_string(c.train.micro_batch) + " * " + std::to_string(c.train.grad_accum) + " * " +
                     std::to_string(c.distributed.nproc_per_node) + " = " + std::to_string(derived) +
                     "; fix one of them or leave global_batch at 0");
    }
    if (ok({"model.block_size", "data.seq_len"}) && c.model.block_size < c.data.seq_len)
      conflict({"data.seq_len", "model.block_size"},
               "data.seq_len " + std::to_string(c.data.seq_len) + " exceeds model.block_size " +
                   std::to_string(c.model.block_size) + " (the model has no positions beyond block_size)");
  }

  // The model source and the files it needs; the attention LibTorch offers.
  void check_model_source(const Config& c) {
    if (ok({"model.source", "model.weights", "model.torchscript"})) {
      const auto& m = c.model;
      if (m.source == "safetensors" && m.weights.empty())
        conflict({"model.source"}, "model.source is safetensors but model.weights is not set");
      if (m.source == "torchscript" && m.torchscript.empty())
        conflict({"model.source"}, "model.source is torchscript but model.torchscript is not set");
      if (m.source != "safetensors" && !m.weights.empty())
        conflict({"model.weights"},
                 "model.weights is set but model.source is " + m.source + " (set model.source: safetensors to use it)");
      if (m.source != "torchscript" && !m.torchscript.empty())
        conflict({"model.torchscript"}, "model.torchscript is set but model.source is " + m.source +
                                            " (set model.source: torchscript to use it)");
    }
    if (ok({"model.attention"}) && c.model.attention == "sdpa" && !build::kLibTorchHasSdpa)
      conflict({"model.attention"},
               std::string("model.attention sdpa needs LibTorch 2.0 or newer; this anchor is built against "
                           "LibTorch ") +
                   build::kLibTorchVersion +
                   " (use manual, or auto, which is manual here; or build against PyTorch 2.x: make torch2)");
  }

  // The run's length, the heads, the vocabulary the data holds.
  void check_length_and_shape(const Config& c) {
    if (ok({"train.total_steps", "train.total_tokens"}) && c.train.total_steps != 0 && c.train.total_tokens != 0)
      conflict({"train.total_tokens", "train.total_steps"},
               "train.total_steps and train.total_tokens are both set; give the full run's "
               "length one way only");
    if (ok({"model.n_embd", "model.n_head"}) && c.model.n_embd % c.model.n_head != 0)
      conflict({"model.n_embd", "model.n_head"}, "model.n_embd " + std::to_string(c.model.n_embd) +
                                                     " is not divisible by model.n_head " +
                                                     std::to_string(c.model.n_head));
    if (ok({"data.format", "model.vocab_size", "model.source"}) && c.model.source != "torchscript") {
      if (c.data.format == "text" && c.model.vocab_size != 256)
        conflict({"model.vocab_size", "data.format"},
                 "data.format text is bytes (256 token values) but model.vocab_size is " +
                     std::to_string(c.model.vocab_size) + "; use 256");
      if (c.data.format == "llmc" && c.model.vocab_size > 65536)
        conflict({"model.vocab_size", "data.format"},
                 "data.format llmc holds uint16 tokens (at most 65536 values) but "
                 "model.vocab_size is " +
                     std::to_string(c.model.vocab_size));
    }
  }

  // What needs a GPU; validation data for the eval.
  void check_device_and_val(const Config& c) {
    if (ok({"train.precision", "device"}) && c.train.precision == "fp16" && c.device == "cpu")
      conflict({"train.precision", "device"}, "train.precision fp16 needs a GPU; on device cpu use bf16 or fp32");
    if (ok({"distributed.backend", "device"}) && c.distributed.backend == "nccl" && c.device == "cpu")
      conflict({"distributed.backend", "device"},
               "distributed.backend nccl needs a GPU; on device cpu use gloo or auto");
    if (ok({"data.val", "data.val_fraction"}) && c.data.val.empty() && c.data.val_fraction == 0)
      conflict({"data.val_fraction", "data.val"},
               "data.val is empty and data.val_fraction is 0: the pilot's eval needs "
               "validation data; list data.val files or set a val_fraction > 0");
  }

  // program.env: NAME=VALUE, and no name anchor sets itself.
  void check_program_env(const Config& c) {
    if (ok({"program.env"}))
      for (const auto& e : c.program.env) {
        const auto eq = e.find('=');
        if (eq == 0 || eq == std::string::npos ||
            e.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") < eq ||
            (e[0] >= '0' && e[0] <= '9'))
          conflict({"program.env"}, "program.env entry '" + e +
                                        "' is not NAME=VALUE (NAME: letters, digits and _, not starting with a digit)");
        else if (e.compare(0, eq, "ANCHOR_PILOT_SPEC") == 0 || e.compare(0, eq, "RANK") == 0 ||
                 e.compare(0, eq, "WORLD_SIZE") == 0 || e.compare(0, eq, "LOCAL_RANK") == 0 ||
                 e.compare(0, eq, "MASTER_PORT") == 0)
          conflict({"program.env"}, "program.env sets " + e.substr(0, eq) +
                                        ", which anchor sets for each worker (docs/program.md, \"The contract\")");
      }
    if (ok({"pilot.resume_world_size", "program.command"}) && c.pilot.resume_world_size != 0 &&
        c.program.command.empty())
      conflict({"pilot.resume_world_size", "program.command"},
               "pilot.resume_world_size is for a program pilot (program.command): the built-in trainer resumes at "
               "the world size it saved at");
  }

  // Warmup, the memory probe and activation checkpointing against the run and the model.
  void check_steps_and_memory(const Config& c) {
    if (ok({"train.schedule.warmup_steps", "train.total_steps"}) && c.train.total_steps > 0 &&
        c.train.schedule.warmup_steps > c.train.total_steps)
      conflict({"train.schedule.warmup_steps", "train.total_steps"},
               "train.schedule.warmup_steps " + std::to_string(c.train.schedule.warmup_steps) +
                   " exceeds train.total_steps " + std::to_string(c.train.total_steps));
    if (ok({"pilot.memory_probe_micro_batch", "train.micro_batch"}) && c.pilot.memory_probe_micro_batch != 0 &&
        c.pilot.memory_probe_micro_batch >= c.train.micro_batch)
      conflict({"pilot.memory_probe_micro_batch", "train.micro_batch"},
               "pilot.memory_probe_micro_batch " + std::to_string(c.pilot.memory_probe_micro_batch) +
                   " must be smaller than train.micro_batch " + std::to_string(c.train.micro_batch) +
                   " (the memory model needs a second, smaller point)");
    if (ok({"train.activation_checkpointing", "model.n_layer", "model.source"}) && c.model.source != "torchscript" &&
        c.train.activation_checkpointing > c.model.n_layer)
      conflict({"train.activation_checkpointing", "model.n_layer"},
               "train.activation_checkpointing " + std::to_string(c.train.activation_checkpointing) +
                   " exceeds model.n_layer " + std::to_string(c.model.n_layer) + ": no block would be checkpointed");
    if (ok({"train.activation_checkpointing", "model.source"}) && c.model.source == "torchscript" &&
        c.train.activation_checkpointing > 0)
      conflict({"train.activation_checkpointing", "model.source"},
               "train.activation_checkpointing needs the built-in model: anchor cannot see the blocks "
               "inside a TorchScript module; set it to 0 with model.source torchscript");
  }

  void add(const Loc& loc, const std::string& key, std::string message) {
    problems_.push_back(Problem{loc.file, loc.line, loc.column, key, std::move(message)});
  }

  void walk(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> seen;  // name -> line first seen
    for (auto it = map.begin(); it != map.end(); ++it) {
      // Copies: Nodes are handles, and it-> yields a temporary proxy.
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      const Loc kloc = at(file_, k.Mark());
      if (!k.IsScalar()) {
        add(kloc, prefix, "keys must be plain names, got " + describe_node(k));
        continue;
      }
      const std::string& name = k.Scalar();
      const std::string dotted = prefix.empty() ? name : prefix + "." + name;
      if (auto [pos, fresh] = seen.emplace(name, kloc.line); !fresh) {
        add(kloc, dotted, "duplicate key (first on line " + std::to_string(pos->second) + ")");
        continue;
      }
      if (name.find('.') != std::string::npos) {
        add(kloc, dotted,
            "dotted keys are for --set; in a file nest them (" + parent_of(name) + ": {" + last_part(name) + ": ...})");
        continue;
      }
      if (const Field* f = schema::find(dotted)) {
        set_leaf(*f, kloc, v, /*from_file=*/true);
      } else if (schema::is_section(dotted)) {
        where_[dotted] = kloc;
        if (v.IsMap()) {
          walk(v, dotted);
        } else if (!v.IsNull()) {  // "pilot:" with nothing under it is an empty section
          add(at(file_, v.Mark()), dotted,
              "expected a mapping with keys (" + join(schema::children(dotted)) + "), got " + describe_node(v));
        }
      } else {
        add(kloc, dotted, unknown_key_message(prefix, name));
      }
    }
  }

  void set_leaf(const Field& f, const Loc& key_loc, const YAML::Node& value, bool from_file) {
    where_[f.key] = key_loc;
    // A null value has no mark of its own worth showing (yaml-cpp puts it on
    // the next line): point at the key then.
    YAML::Mark mark = value.IsNull() ? YAML::Mark::null_mark() : value.Mark();
    std::string err = schema::assign(f, c_, value, &mark);
    if (err.empty()) {
      bad_.erase(f.key);  // a good override replaces a bad file value
      return;
    }
    bad_.insert(f.key);
    Loc loc = key_loc;
    if (from_file && !mark.is_null()) loc = at(file_, mark);
    add(loc, f.key, err);
  }

  bool ok(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (bad_.count(k)) return false;
    return true;
  }

  // A contradiction is reported at the first of `keys` that the file or an
  // override set; when all are defaults, at the file without a position.
  void conflict(std::initializer_list<const char*> keys, std::string message) {
    for (const char* k : keys) {
      auto it = where_.find(k);
      if (it != where_.end()) {
        add(it->second, k, std::move(message));
        return;
      }
    }
    add(Loc{file_, 0, 0}, *keys.begin(), std::move(message));
  }

  std::string file_;
  Config c_;
  std::vector<Problem> problems_;
  std::map<std::string, Loc> where_;  // key or section -> where it was set
  std::set<std::string> bad_;         // keys whose value was rejected
  bool unreadable_ = false;           // a syntax error or a document that is not a mapping
};

Config load_text(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
                 const std::string& base_dir) {
  Loader loader(name);
  loader.read_yaml(text);
  for (const auto& o : overrides) loader.apply_override(o);
  loader.check_base_dir(base_dir);
  loader.check_required();
  loader.cross_check();
  Config c = loader.finish();
  c.base_dir = base_dir.empty() ? stdfs::current_path().string() : base_dir;
  return c;
}

std::string summary(const std::string& file, std::size_t n) {
  return "config " + file + " has " + std::to_string(n) + (n == 1 ? " problem" : " problems");
}

std::string first_file(const std::vector<Problem>& problems) {
  for (const auto& p : problems)
    if (p.file != kSetFile) return p.file;
  return problems.empty() ? std::string("<config>") : problems.front().file;
}

const char* const kHint = "see docs/config.md for every key, its type, default and allowed values";

}  // namespace

std::string Problem::format() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  if (!key.empty()) out += key + ": ";
  return out + message;
}

ConfigError::ConfigError(std::vector<Problem> problems) : ConfigError(first_file(problems), std::move(problems)) {}

ConfigError::ConfigError(const std::string& file, std::vector<Problem> problems)
    : Error(ErrorKind::kConfig, summary(file, problems.size()), kHint), problems_(std::move(problems)) {}

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = fs::read_file(path);  // Error kIo naming the path
  const std::string base = stdfs::absolute(path).parent_path().lexically_normal().string();
  Config c = load_text(text, path, overrides, base);
  c.source_path = path;
  return c;
}

Config load_string(const std::string& yaml, const std::string& name, const std::vector<std::string>& overrides,
                   const std::string& base_dir) {
  return load_text(yaml, name, overrides, base_dir);
}

nlohmann::json to_json(const Config& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : schema::fields()) {
    std::string pointer = "/" + f.key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    j[nlohmann::json::json_pointer(pointer)] = schema::get_json(f, c);
  }
  return j;
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  // The table keeps each section's keys together, so one pass that closes and
  // opens maps as the dotted prefix changes rebuilds the nesting.
  std::vector<std::string> open;
  for (const auto& f : schema::fields()) {
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
      auto dot = f.key.find('.', start);
      parts.push_back(f.key.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    std::size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (std::size_t i = common; i + 1 < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << parts.back() << YAML::Value;
    schema::emit_value(f, c, out);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;

  // A blank line before each top-level key, for reading.
  std::string body = out.c_str();
  std::string spaced;
  std::size_t pos = 0;
  bool first = true;
  while (pos < body.size()) {
    auto nl = body.find('\n', pos);
    std::string line = body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!first && !line.empty() && line[0] != ' ') spaced += "\n";
    spaced += line + "\n";
    first = false;
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return "# anchor effective config (defaults < file < --set); digest " + digest(c) + "\n" + spaced;
}

Config from_json(const nlohmann::json& j, const std::string& base_dir) {
  // JSON text is YAML: going through the same loader gives from_json the same
  // strictness (unknown keys, types, ranges, contradictions) as a file.
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  return load_text(text, "<json>", {}, base_dir);
}

std::string digest(const Config& c) { return sha256_hex(to_json(c).dump()); }

std::string resolve_path(const Config& c, const std::string& p) {
  if (p.empty() || c.base_dir.empty()) return p;
  stdfs::path path(p);
  if (path.is_absolute()) return p;
  return (stdfs::path(c.base_dir) / path).lexically_normal().string();
}

namespace {

// Whether a key's value changes what the pilot trains and measures (its
// losses, steps, evals, verdict and figures). Not: the plan's inputs
// (budget.*), signing (report.*), the export of the final weights (export.*), the run's name and place, checkpoint
// retention, and where checkpoints go unless the pilot starts from one. A
// program pilot's training is its own: anchor's model.*, data.* and train.*
// do not reach it.
bool decides_result(const std::string& key, const Config& now, bool program) {
  for (const char* prefix : {"report.", "budget.", "export."})
    if (key.rfind(prefix, 0) == 0) return false;
  if (key == "run.name" || key == "run.output_dir" || key == "checkpoint.keep_last") return false;
  if (key == "checkpoint.dir") return now.pilot.start_from == "latest";
  if (program)
    for (const char* prefix : {"model.", "data.", "train."})
      if (key.rfind(prefix, 0) == 0) return false;
  return true;
}

// A config-relative path value (a string or a list of them) resolved against base.
nlohmann::json resolved(const nlohmann::json& v, const std::string& base) {
  auto one = [&](const nlohmann::json& s) -> nlohmann::json {
    if (!s.is_string() || s.get<std::string>().empty() || base.empty()) return s;
    const stdfs::path p(s.get<std::string>());
    return p.is_absolute() ? p.lexically_normal().string() : (stdfs::path(base) / p).lexically_normal().string();
  };
  if (!v.is_array()) return one(v);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : v) out.push_back(one(e));
  return out;
}

}  // namespace

std::vector<Difference> diff(const nlohmann::json& past, const std::string& past_base_dir, const Config& now) {
  // Both sides as a report holds them: strings through printable().
  const nlohmann::json current = printable_json(to_json(now)), defaults = printable_json(to_json(Config{}));
  const nlohmann::json::json_pointer command("/program/command");
  const bool program = !now.program.command.empty() || (past.is_object() && past.contains(command) &&
                                                        past.at(command).is_array() && !past.at(command).empty());
  // A past directory that is not absolute (or not known) says nothing about
  // where its relative paths were: they are compared as written.
  const bool resolve = !past_base_dir.empty() && stdfs::path(past_base_dir).is_absolute();
  std::vector<Difference> out;
  for (const auto& f : schema::fields()) {
    std::string pointer = "/" + f.key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const nlohmann::json::json_pointer jp(pointer);
    const nlohmann::json was = past.is_object() && past.contains(jp) ? past.at(jp) : nlohmann::json();
    const nlohmann::json& is = current.at(jp);
    const bool relative = resolve && f.path == schema::PathKind::kConfigRelative;
    // program.cwd empty is the config's directory: "." resolves to it.
    auto at_base = [&](const nlohmann::json& v, const std::string& base) {
      if (f.key == "report.signing_key" && (v == "" || v == "none")) return v;  // not paths: the user key, unsigned
      return resolved(f.key == "program.cwd" && v == "" ? nlohmann::json(".") : v, base);
    };
    const nlohmann::json was_at = relative ? at_base(was, printable(past_base_dir)) : nlohmann::json();
    const nlohmann::json is_at = relative ? at_base(is, printable(now.base_dir)) : nlohmann::json();
    if (relative ? was_at == is_at : was == is) continue;
    // A key an older anchor did not write, now at its default: the run had that default too.
    const bool absent_default = was.is_null() && is == defaults.at(jp);
    out.push_back({f.key, was, is, was_at, is_at, !absent_default && decides_result(f.key, now, program)});
  }
  return out;
}

std::string dropout_purpose(int rank) { return rank == 0 ? "dropout" : "dropout/rank" + std::to_string(rank); }

std::uint64_t derive_seed(std::uint64_t root, const std::string& purpose) {
  std::uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<std::uint8_t>(root >> (8 * i));
  Sha256 h;
  h.update(le, sizeof le);
  h.update(purpose);
  const auto d = h.digest();
  std::uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= static_cast<std::uint64_t>(d[i]) << (8 * i);
  return seed;
}

std::vector<std::string> setting_keys() {
  std::vector<std::string> out;
  for (const auto& f : schema::fields()) out.push_back(f.key);
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions, so
  // "trian" is one edit from "train".
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::vector<std::string*> config_relative_paths(Config& c) {
  std::vector<std::string*> out;
  for (const auto& f : schema::fields()) {
    if (f.path != schema::PathKind::kConfigRelative) continue;
    if (const auto* one = std::get_if<schema::Ref<std::string>>(&f.ref)) {
      out.push_back(&(*one)(c));
    } else if (const auto* many = std::get_if<schema::Ref<std::vector<std::string>>>(&f.ref)) {
      for (auto& p : (*many)(c)) out.push_back(&p);
    }
  }
  return out;
}

}  // namespace anchor::config
