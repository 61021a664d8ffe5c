#include "anchor/reproduce/bundle.hpp"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <variant>

#include <nlohmann/json.hpp>

#include "anchor/build_info.hpp"
#include "anchor/common/copy_verified.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/statement.hpp"

namespace anchor::reproduce {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kTree = "inputs/tree";  // the config directory's place (at its depth, below)
constexpr const char* kAbs = "inputs/abs";    // absolute inputs, under their own path
constexpr std::uint64_t kMostBundleJson = 64u << 20;

// The run's files a bundle carries when the report signed them (each checked against that digest).
constexpr const char* kSignedFiles[] = {"report.json", "manifest.json", "config.json", "report.md", "report.html"};

std::string normal(const std::string& p) { return stdfs::path(p).lexically_normal().string(); }

// The run's report and subjects, from the bytes that verified.
struct Verified {
  run_report::RunReport report;
  std::map<std::string, std::string> subjects;  // name -> sha256
};

Verified read_verified(const std::string& envelope_text) {
  const auto env = report::envelope_from_json(envelope_text);
  Verified v;
  json report;
  try {
    const json statement = parse_json(env.payload);
    report = statement.at("predicate").at("report");
    for (const auto& s : statement.at("subject"))
      v.subjects[s.at("name").get<std::string>()] = s.at("digest").at("sha256").get<std::string>();
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kVerification,
                "the signed statement is not one anchor writes (" + std::string(e.what()) + ")",
                "a bundle carries only a run anchor signed");
  }
  if (!report.is_object())
    throw Error(ErrorKind::kVerification, "the signed statement's predicate holds no report object");
  v.report = run_report::RunReport::from_json(report);
  return v;
}

// A string member of a document anchor did not necessarily write: "" when it
// is absent or not a string (never a json::type_error).
std::string string_member(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// One input file the manifest lists: {path as written, size, sha256}, checked.
struct Input {
  std::string written;
  std::uint64_t size = 0;
  std::string sha256;
};

std::vector<Input> inputs_of(const json& manifest) {
  std::vector<Input> out;
  auto take = [&](const json& files, const std::string& where) {
    if (!files.is_array()) return;
    for (const auto& f : files) {
      const bool ok = f.is_object() && f.contains("path") && f["path"].is_string() &&
                      !f["path"].get<std::string>().empty() && f.contains("size") && f["size"].is_number_unsigned() &&
                      f.contains("sha256") && f["sha256"].is_string() && is_sha256_hex(f["sha256"].get<std::string>());
      if (!ok)
        throw Error(ErrorKind::kVerification,
                    "the report's manifest lists a file under " + where + " without a path, size and SHA-256",
                    "the report was not written by anchor's pin; it cannot be bundled with its data");
      out.push_back({f["path"].get<std::string>(), f["size"].get<std::uint64_t>(), f["sha256"].get<std::string>()});
    }
  };
  if (manifest.contains("model") && manifest["model"].is_object() && manifest["model"].contains("files"))
    take(manifest["model"]["files"], "model.files");
  if (manifest.contains("data") && manifest["data"].is_object())
    for (const char* split : {"train", "val"})
      if (manifest["data"].contains(split) && manifest["data"][split].is_object() &&
          manifest["data"][split].contains("files"))
        take(manifest["data"][split]["files"], std::string("data.") + split + ".files");
  return out;
}

// A relative input path as the number of ".." it starts with and the rest.
std::pair<std::size_t, std::string> split_up(const std::string& written) {
  const stdfs::path n = stdfs::path(written).lexically_normal();
  std::size_t up = 0;
  stdfs::path rest;
  bool leading = true;
  for (const auto& part : n) {
    if (leading && part == "..") {
      ++up;
      continue;
    }
    leading = false;
    rest /= part;
  }
  const std::string r = rest.string();
  if (r.empty() || r == ".")
    throw Error(ErrorKind::kVerification, "the report's manifest lists the input '" + printable(written) +
                                              "', which names no file below a directory");
  return {up, r};
}

// The directories a relative input with `up` leading ".." passes below the
// top of the tree: the last (most_up - up) names of the config's directory, so
// that the tree under inputs/tree mirrors the original one (a glob over
// sibling directories matches the same names, in the same order). A name that
// cannot be one here (not UTF-8, or above "/") is "_".
std::string depth(const std::vector<std::string>& base_tail, std::size_t most_up, std::size_t up) {
  std::string s;
  for (std::size_t i = 0; i < most_up - up; ++i) s += "/" + base_tail[i];
  return s;
}

std::vector<std::string> tail_names(const std::string& base_dir, std::size_t most_up) {
  std::vector<std::string> names;
  for (const auto& part : stdfs::path(base_dir).lexically_normal().relative_path()) {
    const std::string n = part.string();
    if (!n.empty() && n != "." && n != "..") names.push_back(is_valid_utf8(n) ? n : "_");
  }
  std::vector<std::string> tail;
  for (std::size_t i = 0; i < most_up; ++i)
    tail.push_back(most_up - i <= names.size() ? names[names.size() - (most_up - i)] : "_");
  return tail;
}

// The most ".." any relative path the config names starts with: its inputs'
// globs resolve from the root and must stay inside inputs/tree.
// `cfg` is not const only because the schema's Refs take a Config&: it is read, never changed.
std::size_t most_up_of(config::Config& cfg, const std::vector<Input>& inputs) {
  std::size_t most = 0;
  auto take = [&](const std::string& p) {
    if (p.empty() || stdfs::path(p).is_absolute()) return;
    std::size_t up = 0;
    for (const auto& part : stdfs::path(p).lexically_normal()) {
      if (part != "..") break;
      ++up;
    }
    most = std::max(most, up);
  };
  for (const auto& in : inputs) take(in.written);
  for (const std::string* p : config::config_relative_paths(cfg)) take(*p);
  return most;
}

// The inputs as the files the bundle gets, and where a reproduction finds them.
struct PlacedInputs {
  std::vector<fs::KnownFile> files;
  std::string root;  // relative to the bundle; empty: no relative input
  bool absolute = false;
};

PlacedInputs place_inputs(const json& manifest) {
  config::Config cfg = manifest::config_from_manifest(manifest);  // not const: most_up_of's schema Refs
  const std::vector<Input> inputs = inputs_of(manifest);
  const std::size_t most_up = most_up_of(cfg, inputs);
  const std::vector<std::string> base_tail = tail_names(cfg.base_dir, most_up);
  PlacedInputs out;
  std::map<std::string, std::string> taken;  // bundle name -> sha256: one file named twice is carried once
  for (const auto& in : inputs) {
    fs::KnownFile f{"", in.size, in.sha256, ""};
    if (stdfs::path(in.written).is_absolute()) {
      f.name = std::string(kAbs) + normal(in.written);
      f.source = in.written;
      out.absolute = true;
    } else {
      const auto [up, rest] = split_up(in.written);
      f.name = std::string(kTree) + depth(base_tail, most_up, up) + "/" + rest;
      f.source = config::resolve_path(cfg, in.written);
      out.root = std::string(kTree) + depth(base_tail, most_up, 0);
    }
    if (const auto it = taken.find(f.name); it != taken.end()) {
      if (it->second != f.sha256)
        throw Error(ErrorKind::kVerification,
                    "the report's manifest lists " + printable(in.written) + " twice with different digests");
      continue;
    }
    taken[f.name] = f.sha256;
    out.files.push_back(std::move(f));
  }
  return out;
}

fs::KnownFile known(const std::string& name, const std::string& source, const std::string& role, json& listed) {
  const auto d = sha256_file(source);
  listed.push_back({{"name", name}, {"size", d.size}, {"sha256", d.sha256}, {"role", role}});
  return fs::KnownFile{name, d.size, d.sha256, source};
}

std::string default_output(const run_report::RunReport& report) {
  const std::string id = report.run_id.value_or("");
  static const std::regex plain("[A-Za-z0-9][A-Za-z0-9._-]{0,200}");
  if (!std::regex_match(id, plain))
    throw Error(ErrorKind::kUsage, "the report's run_id is not a plain file name",
                "name the bundle's directory with -o DIR");
  return id + ".bundle";
}

// What a name bundle.json lists is below the bundle directory.
enum class Entry { kRegular, kMissing, kNotPlain };

// Walks `name` below `dir` without following anything: every component but the
// last must be a directory, the last a regular file; a symbolic link anywhere
// (or a FIFO, a device) is kNotPlain, and a component that is not there kMissing.
Entry entry_at(const std::string& dir, const std::string& name, stdfs::file_type last = stdfs::file_type::regular) {
  stdfs::path at(dir);
  const stdfs::path rel(name);
  std::size_t left = std::distance(rel.begin(), rel.end());
  for (const auto& part : rel) {
    at /= part;
    std::error_code ec;
    const auto st = stdfs::symlink_status(at, ec);
    if (st.type() == stdfs::file_type::not_found) return Entry::kMissing;
    if (ec) return Entry::kNotPlain;
    if (--left == 0) return st.type() == last ? Entry::kRegular : Entry::kNotPlain;
    if (st.type() != stdfs::file_type::directory) return Entry::kNotPlain;
  }
  return Entry::kNotPlain;
}

// inputs.root / inputs.absolute: a plain name under inputs/ with no symbolic
// link on the way, or "" when null.
std::string directory_within(const std::string& dir, const json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return "";
  std::string s = j[key].is_string() ? j[key].get<std::string>() : std::string();  // not const: returned by move
  if (!fs::is_name_within(s) || s.rfind("inputs/", 0) != 0)
    throw Error(ErrorKind::kUsage, file + ": inputs." + key + " is not a directory under inputs/",
                "a bundle holds only what `anchor bundle` wrote; copy it again from where it was made");
  // It need not exist (paths resolve from it lexically: the config's own
  // directory holds no input when they all live beside it), but what is there
  // of it is plain.
  if (entry_at(dir, s, stdfs::file_type::directory) == Entry::kNotPlain)
    throw Error(
        ErrorKind::kUsage,
        file + ": inputs." + key + " (" + printable(s) + ") is not a plain directory of the bundle (a symbolic link?)",
        "a bundle holds only the files `anchor bundle` wrote");
  return s;
}

// Every file bundle.json lists, checked to be where it says and plain (not
// yet read: open_bundle checks the bytes after everything structural).
std::vector<fs::KnownFile> listed_files(const json& j, const std::string& dir, const std::string& file) {
  if (!j.contains("files") || !j["files"].is_array()) throw Error(ErrorKind::kUsage, file + " lists no files");
  std::vector<fs::KnownFile> files;
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string() ||
        !is_sha256_hex(f["sha256"].get<std::string>()))
      throw Error(ErrorKind::kUsage, file + " lists a file without a name, size and SHA-256");
    const std::string name = f["name"].get<std::string>();
    if (name.find('\0') != std::string::npos || !fs::is_name_within(name)) {
      std::string shown = printable(name);  // a NUL shown, not the end of the message
      for (std::size_t at; (at = shown.find('\0')) != std::string::npos;) shown.replace(at, 1, "\\x00");
      throw Error(ErrorKind::kUsage, file + " lists '" + shown + "', which is not a relative path within the directory",
                  "a bundle holds only what `anchor bundle` wrote; copy it again from where it was made");
    }
    files.push_back({name, f["size"].get<std::uint64_t>(), f["sha256"].get<std::string>(), ""});
  }
  for (const auto& f : files) {
    const Entry e = entry_at(dir, f.name);
    if (e == Entry::kNotPlain)
      throw Error(
          ErrorKind::kUsage,
          "the bundle's " + printable(f.name) + " is not a regular file in a plain directory (a symbolic link?)",
          "a bundle holds only the files `anchor bundle` wrote");
    if (e == Entry::kMissing)
      throw Error(ErrorKind::kVerification, "the bundle lost " + printable(f.name) + " (bundle.json lists it)",
                  "copy the whole bundle again from where it was made");
  }
  return files;  // their bytes are checked by the caller, after every structural check
}

// Everything under inputs/ is listed: a file there that bundle.json does not
// list would be found by a glob. A symbolic link there is refused whatever it
// points at (the scan does not follow it; a reproduction's glob would).
void check_inputs_listed(const std::string& dir, const std::set<std::string>& names) {
  std::error_code ec;
  const std::string inputs = dir + "/inputs";
  const auto top = stdfs::symlink_status(inputs, ec).type();
  if (top == stdfs::file_type::not_found) return;
  if (top != stdfs::file_type::directory)
    throw Error(ErrorKind::kUsage, "the bundle's inputs is not a plain directory (a symbolic link?)",
                "a bundle holds only the files `anchor bundle` wrote");
  auto it = stdfs::recursive_directory_iterator(inputs, ec);
  for (; !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).string();
    std::error_code tec;
    const auto type = it->symlink_status(tec).type();
    if (tec) {
      ec = tec;
      break;
    }
    if (type == stdfs::file_type::directory) continue;
    if (type != stdfs::file_type::regular)
      throw Error(ErrorKind::kUsage,
                  "the bundle's " + printable(rel) + " is not a regular file or directory (a symbolic link?)",
                  "a bundle holds only the files `anchor bundle` wrote");
    if (!names.count(rel))
      throw Error(ErrorKind::kVerification,
                  "the bundle's inputs hold " + printable(rel) + ", which bundle.json does not list",
                  "a bundle's inputs are the run's and nothing else: remove it, or copy the bundle again");
  }
  if (ec)
    throw Error(ErrorKind::kIo, "cannot read the bundle's inputs under " + printable(inputs) + ": " + ec.message(),
                "check its permissions; every file there is checked before a reproduction reads any");
}

// The run's envelope (the run directory's, or the file named); verified as
// `anchor verify` does, with its files.
struct VerifiedRun {
  std::string envelope;
  report::VerifyResult v;
};

VerifiedRun verify_run(const BundleOptions& opts) {
  std::error_code ec;
  const bool is_dir = stdfs::is_directory(opts.run, ec);
  VerifiedRun run;
  run.envelope = is_dir ? (stdfs::path(opts.run) / report::kEnvelopeFile).string() : opts.run;
  if (!stdfs::exists(run.envelope, ec))
    throw Error(ErrorKind::kUsage,
                printable(opts.run) + " holds no " + report::kEnvelopeFile + ": only a signed run can be bundled",
                "give the run directory of a signed pilot (one not run with report.signing_key: none)");

  report::VerifyOptions vo;
  vo.public_key_path = opts.key;
  vo.check_files = true;
  run.v = report::verify_envelope(run.envelope, vo);
  if (!run.v.ok) {
    std::string all;
    for (const auto& f : run.v.failures) all += "\n  " + f;
    throw Error(ErrorKind::kVerification, "the run does not verify:" + all,
                "`anchor verify " + printable(run.envelope) + "` says why; a bundle carries only a run that verifies");
  }
  return run;
}

// The files the bundle carries (with where each is copied from) and
// bundle.json's list of them, in the same order.
struct BundleFiles {
  json listed = json::array();
  std::vector<fs::KnownFile> files;
};

// The envelope, its key, the signed subjects the run has and its provenance.
void add_run_files(const VerifiedRun& run, const Verified& signed_run, const std::string& run_dir, BundleFiles& out) {
  const report::VerifyResult& v = run.v;
  // The envelope as it verified (the copy is checked against these bytes), and its key.
  out.files.push_back({report::kEnvelopeFile, v.envelope_text.size(), sha256_hex(v.envelope_text), run.envelope});
  out.listed.push_back({{"name", report::kEnvelopeFile},
                        {"size", v.envelope_text.size()},
                        {"sha256", sha256_hex(v.envelope_text)},
                        {"role", "report envelope"}});
  out.files.push_back(known(report::kPublicKeyFile, v.public_key_path, "public key", out.listed));
  for (const char* name : kSignedFiles) {
    const auto it = signed_run.subjects.find(name);
    if (it == signed_run.subjects.end()) continue;
    const auto d = sha256_file((stdfs::path(run_dir) / name).string());
    out.files.push_back({name, d.size, it->second, (stdfs::path(run_dir) / name).string()});
    out.listed.push_back({{"name", name}, {"size", d.size}, {"sha256", it->second}, {"role", "signed subject"}});
  }
  std::error_code ec;
  const std::string provenance = (stdfs::path(run_dir) / "provenance.intoto.json").string();
  if (stdfs::exists(provenance, ec))
    out.files.push_back(known("provenance.intoto.json", provenance, "provenance", out.listed));
}

// The catalog the plan's figures came from: the bytes whose digest the report records.
void add_catalog(const run_report::RunReport& report, BundleFiles& out, std::vector<std::string>& warnings) {
  if (const auto catalog = recorded_catalog(report)) {
    const auto& [path, want] = *catalog;
    FileDigest d;
    try {
      d = sha256_file(path);
    } catch (const Error& e) {
      throw Error(ErrorKind::kVerification, "the catalog the run planned with cannot be read: " + std::string(e.what()),
                  "restore " + printable(path) + " (sha256 " + want + "): the bundle carries the catalog the run used");
    }
    if (d.sha256 != want)
      throw Error(ErrorKind::kVerification,
                  "the catalog the run planned with, " + printable(path) + ", changed since (sha256 " + d.sha256 +
                      ", the report records " + want + ")",
                  "restore that catalog: the bundle carries the catalog the run used, by its signed digest");
    out.files.push_back({"catalog.yaml", d.size, want, path});
    out.listed.push_back({{"name", "catalog.yaml"}, {"size", d.size}, {"sha256", want}, {"role", "catalog"}});
  } else {
    warnings.push_back(
        "the report records no device catalog (a run before anchor recorded it, or one with no "
        "plan): the bundle carries none, and a reproduction plans with the catalog it finds");
  }
}

// --with-data: the run's inputs the manifest lists; returns bundle.json's
// "inputs" (where a reproduction finds them) and counts them in `r`.
json add_inputs(const run_report::RunReport& report, BundleFiles& out, BundleResult& r) {
  if (!report.manifest) throw Error(ErrorKind::kVerification, "the report has no manifest: its inputs are unknown");
  PlacedInputs placed = place_inputs(run_report::section_to_json(*report.manifest));
  for (auto& f : placed.files) {
    out.listed.push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}, {"role", "input"}});
    out.files.push_back(std::move(f));
    ++r.inputs;
  }
  return {{"root", placed.root.empty() ? json(nullptr) : json(placed.root)},
          {"absolute", placed.absolute ? json(kAbs) : json(nullptr)}};
}

// The bundle's directory: -o DIR, else named after the run; never one that exists.
std::string output_dir(const BundleOptions& opts, const run_report::RunReport& report) {
  std::string out = opts.output.empty() ? default_output(report) : opts.output;
  while (out.size() > 1 && out.back() == '/') out.pop_back();  // "made/" names the directory made
  std::error_code ec;
  if (stdfs::exists(stdfs::symlink_status(out, ec)))
    throw Error(ErrorKind::kUsage, "the bundle " + printable(out) + " already exists",
                "nothing is replaced: remove it, or name another directory with -o DIR");
  return out;
}

// bundle.json travels with the rest: written beside the destination first,
// copied in with every other file, removed. Returns the bytes copied.
std::uint64_t copy_with_bundle_json(const std::string& run_dir, const json& bundle, const std::string& out,
                                    std::vector<fs::KnownFile>& files) {
  std::error_code ec;
  const stdfs::path target(out);
  const std::string parent = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string staged = parent + "/." + target.filename().string() + ".bundle-json.tmp-" + fs::random_suffix();
  const std::string text = dump_json(bundle, 2) + "\n";
  if (!stdfs::is_directory(parent, ec))
    throw Error(ErrorKind::kIo, "the bundle's parent directory " + printable(parent) + " does not exist",
                "create it first (anchor does not: a missing mount would be filled on the local disk instead)");
  fs::atomic_write_file(staged, text);
  files.push_back({kBundleFile, text.size(), sha256_hex(text), staged});
  std::uint64_t bytes = 0;
  try {
    const auto copied = fs::copy_verified(run_dir, files, out);
    bytes = copied.bytes;
  } catch (const Error& e) {
    stdfs::remove(staged, ec);
    // A copy that did not read back at the destination is the storage's fault, not the run's.
    if (e.kind() != ErrorKind::kVerification ||
        std::string(e.what()).find("read back before publishing") != std::string::npos)
      throw;
    // A source that is not what was signed: the run's file, or an input, changed since.
    throw Error(e.kind(), std::string(e.what()) + "; it changed since the run was signed",
                "a bundle carries only what the report signs: restore the file, or run the pilot again and bundle "
                "that run (nothing was written)");
  } catch (...) {
    stdfs::remove(staged, ec);
    throw;
  }
  stdfs::remove(staged, ec);
  return bytes;
}

}  // namespace

BundleResult write_bundle(const BundleOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const VerifiedRun run = verify_run(opts);
  BundleResult r;
  r.key_id = run.v.key_id;
  r.warnings = run.v.warnings;
  const Verified signed_run = read_verified(run.v.envelope_text);
  const std::string run_dir =
      stdfs::path(run.envelope).parent_path().empty() ? "." : stdfs::path(run.envelope).parent_path().string();

  BundleFiles carried;
  add_run_files(run, signed_run, run_dir, carried);
  add_catalog(signed_run.report, carried, r.warnings);
  json inputs = nullptr;
  if (opts.with_data) inputs = add_inputs(signed_run.report, carried, r);

  const std::string out = output_dir(opts, signed_run.report);
  json bundle = {
      {"format", kBundleFormat},     {"run_id", signed_run.report.run_id.value_or("")},
      {"key_id", run.v.key_id},      {"anchor", {{"version", build::kVersion}, {"git_commit", build::kGitCommit}}},
      {"with_data", opts.with_data}, {"inputs", inputs},
      {"files", carried.listed}};
  r.bytes = copy_with_bundle_json(run_dir, bundle, out, carried.files);
  r.dir = out;
  r.files = carried.files.size() - 1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

InputPlaces input_places(const nlohmann::json& manifest) {
  const PlacedInputs placed = place_inputs(manifest);
  return {placed.root, placed.absolute ? std::string(kAbs) : std::string()};
}

std::optional<std::pair<std::string, std::string>> recorded_catalog(const run_report::RunReport& report) {
  if (!report.plan || !report.plan->is_object() || !report.plan->contains("catalog")) return std::nullopt;
  const json& c = report.plan->at("catalog");
  const std::string path = string_member(c, "path"), sha = string_member(c, "sha256");
  if (path.empty() || !is_sha256_hex(sha)) return std::nullopt;
  return std::make_pair(path, sha);
}

bool is_bundle(const std::string& path) {
  std::error_code ec;
  return stdfs::is_directory(path, ec) && stdfs::exists(stdfs::path(path) / kBundleFile, ec);
}

OpenedBundle open_bundle(const std::string& dir) {
  OpenedBundle b;
  b.dir = normal(stdfs::absolute(dir).string());
  while (b.dir.size() > 1 && b.dir.back() == '/') b.dir.pop_back();
  const std::string file = b.dir + "/" + kBundleFile;
  if (entry_at(b.dir, kBundleFile) != Entry::kRegular)
    throw Error(ErrorKind::kUsage, printable(file) + " is not a regular file",
                "give the directory `anchor bundle` wrote");
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > kMostBundleJson)
    throw Error(ErrorKind::kUsage, printable(file) + " is larger than any bundle.json anchor writes");
  json j;
  try {
    j = parse_json(fs::read_file(file));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kUsage, printable(file) + " is not JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != json(kBundleFormat))
    throw Error(ErrorKind::kUsage,
                printable(file) + " is not an " + kBundleFormat + " bundle (format " +
                    (j.is_object() && j.contains("format") ? printable(j["format"].dump()) : std::string("missing")) +
                    ")",
                "this anchor reads " + std::string(kBundleFormat) + "; a newer bundle needs a newer anchor");
  // What bundle.json says about itself first (exit 2), then what it lists (missing: exit 3).
  if (j.contains("with_data") && !j["with_data"].is_boolean())
    throw Error(ErrorKind::kUsage, printable(file) + ": with_data is not true or false");
  b.with_data = j.contains("with_data") && j["with_data"].get<bool>();
  if (b.with_data) {
    const json in = j.contains("inputs") ? j["inputs"] : json::object();
    if (!in.is_object()) throw Error(ErrorKind::kUsage, printable(file) + ": inputs is not an object");
    const std::string root = directory_within(b.dir, in, "root", printable(file));
    const std::string abs = directory_within(b.dir, in, "absolute", printable(file));
    if (!root.empty()) b.inputs.root = b.dir + "/" + root;
    if (!abs.empty()) b.inputs.prefixes.push_back({"/", b.dir + "/" + abs});
    b.places = {root, abs};
  }
  const std::vector<fs::KnownFile> files = listed_files(j, b.dir, printable(file));

  std::set<std::string> names;
  for (const auto& f : files) names.insert(f.name);
  auto has = [&](const std::string& name) { return names.count(name) > 0; };
  for (const char* needed : {report::kEnvelopeFile, report::kPublicKeyFile})
    if (!has(needed)) throw Error(ErrorKind::kUsage, printable(file) + " does not list " + needed);
  b.envelope = b.dir + "/" + report::kEnvelopeFile;
  b.public_key = b.dir + "/" + report::kPublicKeyFile;
  if (has("catalog.yaml")) b.catalog = b.dir + "/catalog.yaml";
  check_inputs_listed(b.dir, names);  // with or without data: nothing unlisted under inputs/
  fs::verify_files(b.dir, files);     // then every byte: a changed or truncated file is exit 3
  for (const auto& f : files) b.files[f.name] = f.sha256;
  return b;
}

void check_signed_subjects(const OpenedBundle& b, const std::string& verified_envelope_text) {
  const auto subjects = read_verified(verified_envelope_text).subjects;
  for (const auto& [name, sha] : b.files) {
    const auto it = subjects.find(name);
    if (it == subjects.end() || it->second == sha) continue;
    throw Error(ErrorKind::kVerification,
                "the bundle's " + printable(name) + " is not the file the run signed (SHA-256 " + sha + ", signed " +
                    it->second + "): it was changed after signing, and bundle.json made to agree",
                "copy the bundle again from where it was made, or bundle the run again");
  }
}

}  // namespace anchor::reproduce
