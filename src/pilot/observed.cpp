#include "anchor/pilot/observed.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>
#include <map>

#include "anchor/common/json_fields.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::pilot::observed {

std::string with_step(const std::string& path, std::int64_t from, std::int64_t to) {
  const std::string want = std::to_string(from), put = std::to_string(to);
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (!std::isdigit(static_cast<unsigned char>(path[i]))) {
      out += path[i++];
      continue;
    }
    std::size_t j = i;
    while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j]))) ++j;
    const std::string run = path.substr(i, j - i);
    const std::size_t nz = std::min(run.find_first_not_of('0'), run.size() - 1);  // "0" stays "0"
    if (run.substr(nz) == want) {
      const bool padded = nz > 0;
      out += padded && put.size() < run.size() ? std::string(run.size() - put.size(), '0') + put : put;
    } else {
      out += run;
    }
    i = j;
  }
  return out;
}

std::vector<std::string> files_under(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (!it->is_regular_file(sec) || it->is_symlink(sec)) continue;
    const std::string rel = fs::relative(it->path(), root).string();
    if (rel != ".anchor.lock") out.push_back(rel);  // anchor's own: one pilot per checkpoint directory
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json TornSave::to_json() const {
  std::vector<std::string> f, m;
  for (const auto& s : files) f.push_back(printable(s));
  for (const auto& s : missing) m.push_back(printable(s));
  return {{"step", step}, {"files", f}, {"bytes", sizes}, {"missing", m}};
}

namespace {
std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + printable(names[i]);
  if (names.size() > 8) out += " and " + std::to_string(names.size() - 8) + " more";
  return out;
}
}  // namespace

std::string TornSave::summary() const {
  return "step " + std::to_string(step) + ": " + std::to_string(files.size()) + " file" +
         (files.size() == 1 ? "" : "s") + " written, " + std::to_string(missing.size()) + " missing";
}

bool TornSave::named_in(const std::string& text) const {
  // A file of the save, or a directory holding one ("Can't find a valid checkpoint at .../checkpoint-6"),
  // ending where a path component ends.
  auto names = [&](const std::string& what) {
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      const std::size_t end = at + what.size();
      const bool starts = at == 0 || text[at - 1] == '/' || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
      const bool ends = end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end]));
      if (starts && ends) return true;
    }
    return false;
  };
  for (const auto* list : {&files, &missing})
    for (const auto& f : *list)
      for (std::string p = f; !p.empty() && p != "."; p = std::filesystem::path(p).parent_path().string())
        if (names(p)) return true;
  return false;
}

std::string TornSave::words(std::int64_t saved) const {
  std::vector<std::string> held;
  for (std::size_t i = 0; i < files.size(); ++i)
    held.push_back(files[i] + (i < sizes.size() ? " (" + std::to_string(sizes[i]) + " bytes)" : ""));
  std::string out = "it holds " + (files.empty() ? std::string("no file") : listed(held));
  if (!missing.empty())
    out += " and lacks " + listed(missing) + " (which your save of step " + std::to_string(saved) + " wrote)";
  return out;
}

TornSave torn_save(const std::string& ckpt_dir, const std::set<std::string>& finished,
                   const std::vector<std::string>& saved_files, std::int64_t saved, std::int64_t killed) {
  TornSave t;
  t.step = killed;
  const auto now = files_under(ckpt_dir);
  const std::set<std::string> there(now.begin(), now.end());
  for (const auto& f : now)
    if (!finished.count(f)) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(std::filesystem::path(ckpt_dir) / f, ec);
      t.files.push_back(f);
      t.sizes.push_back(ec ? 0 : size);
    }
  for (const auto& f : saved_files) {
    const std::string g = with_step(f, saved, killed);
    if (g != f && !there.count(g)) t.missing.push_back(g);
  }
  return t;
}

HashedSave hashed_save(const std::string& ckpt_dir, std::int64_t step, const std::vector<std::string>& files) {
  HashedSave save{step, {}};
  for (const auto& f : files) {
    const auto d = sha256_file((std::filesystem::path(ckpt_dir) / f).string());
    save.files.push_back({f, d.size, d.sha256});
  }
  return save;
}

nlohmann::json HashedSave::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files) list.push_back({{"path", printable(f.path)}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  return {{"step", step}, {"files", list}};
}

std::string copy_pinned_save(const std::string& ckpt_dir, const HashedSave& save, const std::string& to) {
  for (const auto& f : save.files) {
    const std::filesystem::path rel(f.path);
    const bool climbs = std::any_of(rel.begin(), rel.end(), [](const auto& part) { return part == ".."; });
    if (rel.empty() || rel.is_absolute() || climbs)
      return printable(f.path) + " is not a path inside the checkpoint directory";
    const auto out = std::filesystem::path(to) / rel;
    std::error_code ec;
    std::filesystem::create_directories(out.parent_path(), ec);
    if (!ec)
      std::filesystem::copy_file(std::filesystem::path(ckpt_dir) / rel, out,
                                 std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return printable(f.path) + " could not be copied: " + ec.message();
    const auto d = sha256_file(out.string());
    if (d.sha256 != f.sha256)
      return printable(f.path) + " changed after the save (" + std::to_string(d.size) + " bytes, SHA-256 " +
             d.sha256.substr(0, 12) + " now, " + f.sha256.substr(0, 12) + " pinned)";
  }
  return "";
}

std::vector<checkpoint::DcpVerification> dcp_in_save(const std::string& ckpt_dir,
                                                     const std::vector<std::string>& files) {
  std::vector<checkpoint::DcpVerification> out;
  for (const auto& f : files) {
    const std::filesystem::path rel(f);
    if (rel.filename() != ".metadata") continue;
    auto v = checkpoint::verify_dcp((std::filesystem::path(ckpt_dir) / rel.parent_path()).string());
    v.dir = rel.parent_path().empty() ? "." : rel.parent_path().string();  // as the report names files
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

struct Pinned {
  std::int64_t step = 0;
  std::map<std::string, std::pair<std::uint64_t, std::string>> files;  // under the directory: bytes, sha256
};

// The saves report.json's program_checkpoints pins, each file's path relative to the checkpoint directory.
std::vector<Pinned> pinned_saves(const nlohmann::json& report) {
  std::vector<Pinned> out;
  try {
    const JsonFields top(report, "");
    if (!top.has("program_checkpoints"))
      throw Error(ErrorKind::kUsage,
                  "the report pins no program checkpoints (it is not a program pilot's in "
                  "observed mode)",
                  "give the report of a pilot whose program saved with its own code (docs/program.md)");
    const JsonFields ck(top.object("program_checkpoints"), "program_checkpoints");
    const auto& saves = ck.array("saves");
    for (std::size_t i = 0; i < saves.size(); ++i) {
      const JsonFields save(saves.at(i), JsonFields::item("program_checkpoints.saves", i));
      Pinned p;
      p.step = save.integer("step");
      const auto& files = save.array("files");
      for (std::size_t j = 0; j < files.size(); ++j) {
        const JsonFields f(files.at(j), JsonFields::item(save.path("files"), j));
        const auto bytes = f.integer("bytes");
        const std::string sha = f.str("sha256");
        if (bytes < 0 || !is_sha256_hex(sha))
          throw std::invalid_argument(JsonFields::item(save.path("files"), j) +
                                      " has a negative size or a "
                                      "sha256 that is no digest");
        p.files[f.str("path")] = {static_cast<std::uint64_t>(bytes), sha};
      }
      out.push_back(std::move(p));
    }
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::kUsage, std::string("the report's program_checkpoints: ") + e.what(),
                "give the report.json a program pilot wrote (anchor verify checks it is the signed one)");
  }
  return out;
}

// "model.pt" for "step_3/model.pt" under "step_3"; empty when `path` is not under `name` or leaves it.
std::string under(const std::string& path, const std::string& name) {
  if (path.compare(0, name.size() + 1, name + "/") != 0) return {};
  const std::string rest = path.substr(name.size() + 1);
  for (const auto& part : std::filesystem::path(rest))
    if (part == ".." || part == ".") return {};
  return rest.empty() || rest.front() == '/' ? std::string() : rest;
}

}  // namespace

PinnedCheck check_pinned(const std::string& dir, const nlohmann::json& report) {
  const std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  const Pinned* best = nullptr;
  std::size_t best_n = 0;
  const auto saves = pinned_saves(report);
  std::set<std::string> tops;  // the directories the saves wrote into, for the hint
  for (const auto& s : saves) {
    std::size_t n = 0;
    for (const auto& [path, pin] : s.files) {
      n += !under(path, name).empty();
      if (const auto slash = path.find('/'); slash != std::string::npos) tops.insert(path.substr(0, slash));
    }
    if (n > best_n) best = &s, best_n = n;
  }
  if (!best) {
    std::string names;
    std::size_t listed = 0;
    for (const auto& t : tops)
      if (++listed <= 20) names += (names.empty() ? "" : ", ") + t;
    if (tops.size() > 20) names += " and " + std::to_string(tops.size() - 20) + " more";
    throw Error(ErrorKind::kUsage, "the report pins no save under a directory named " + printable(name),
                names.empty() ? "its saves wrote their files straight into the checkpoint directory, not into a "
                                "directory of their own"
                              : "pass one of the directories its saves wrote: " + printable(names));
  }
  PinnedCheck c;
  c.step = best->step;
  std::set<std::string> pinned;
  for (const auto& [path, pin] : best->files) {
    const std::string rest = under(path, name);
    if (rest.empty()) continue;
    pinned.insert(rest);
    ++c.files;
    const std::string at = (std::filesystem::path(dir) / rest).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(at, ec))) {
      c.problems.push_back(printable(rest) + " is missing (or not a regular file): the save of step " +
                           std::to_string(c.step) + " wrote it");
      continue;
    }
    const auto d = sha256_file(at);
    c.bytes += d.size;
    if (d.size != pin.first)
      c.problems.push_back(printable(rest) + " holds " + std::to_string(d.size) + " bytes; the report pins " +
                           std::to_string(pin.first));
    else if (d.sha256 != pin.second)
      c.problems.push_back(printable(rest) + ": SHA-256 " + d.sha256 + ", the report pins " + pin.second);
  }
  for (const auto& f : files_under(dir))
    if (!pinned.count(f))
      c.problems.push_back(printable(f) + " is not in the save of step " + std::to_string(c.step) + " the report pins");
  return c;
}

nlohmann::json PinnedCheck::to_json() const {
  return {{"step", step}, {"files", files}, {"bytes", bytes}, {"problems", problems}, {"ok", problems.empty()}};
}

}  // namespace anchor::pilot::observed
