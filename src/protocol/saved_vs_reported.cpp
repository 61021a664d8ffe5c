#include "anchor/protocol/saved_vs_reported.hpp"

#include <stdexcept>

#include "anchor/common/json_fields.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::protocol {

using nlohmann::json;

namespace {

void read_pins(PinnedStep& p, const json& state, const json& manifest) {
  const std::string where = p.dir + "/";
  const JsonFields m(manifest, where + "manifest.json");
  const json& files = m.array("files");
  for (std::size_t i = 0; i < files.size(); ++i) {
    const JsonFields f(files[i], JsonFields::item(m.path("files"), i));
    if (f.has("sha256")) p.sha256[f.str("path")] = f.str("sha256");
  }
  const JsonFields s(state, where + "state.json");
  p.format = s.str_or("format", "");
  if (p.format != kHelperStateFormat) return;  // not the helper's save: its digests are the program's own
  if (!s.has("components")) throw std::invalid_argument(where + "state.json has no components");
  const JsonFields components(s.object("components"), s.path("components"));
  for (const auto& item : s.object("components").items()) p.files[item.key()] = components.strings(item.key().c_str());
  if (s.has("dcp"))
    for (const auto& name : s.strings("dcp")) p.dcp.insert(name);
}

}  // namespace

PinnedStep PinnedStep::from_json(std::int64_t step, const std::string& dir, const json& state, const json& manifest) {
  PinnedStep p;
  p.step = step;
  p.dir = dir;
  try {
    read_pins(p, state, manifest);
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::kVerification,
                std::string(e.what()) + ": not a step anchor_pilot's Pilot.save wrote (docs/program.md)");
  }
  return p;
}

std::string Contradiction::words() const {
  const std::string who = worker + (rank ? " rank " + std::to_string(rank) : "");
  if (reported.empty())
    return who + " printed no digest of the " + component + " at its save of step " + std::to_string(step) +
           ", which saved it as " + file;
  if (file.empty())
    return who + " printed a digest of the " + component + " at its save of step " + std::to_string(step) +
           ", which holds no such component";
  return who + " printed the " + component + " at its save of step " + std::to_string(step) + " as " +
         reported.substr(0, 12) + ", but the committed " + file + " is " + pinned.substr(0, 12);
}

json Contradiction::to_json() const {
  return {{"worker", worker},        {"rank", rank},         {"step", step},     {"component", printable(component)},
          {"file", printable(file)}, {"reported", reported}, {"pinned", pinned}, {"words", printable(words())}};
}

json SaveCrossCheck::to_json() const {
  json c = json::array();
  for (const auto& x : contradictions) c.push_back(x.to_json());
  return {{"worker", worker},           {"step", step},       {"dir", printable(dir)}, {"compared", compared},
          {"not_checked", not_checked}, {"contradictions", c}};
}

namespace {

// The file a rank's digest of `component` describes: the one every rank shares (rank 0 writes it),
// or the rank's own. Empty when the rank writes none (a shared file, off rank 0).
std::string file_of(const PinnedStep& p, const std::string& component, int rank) {
  const auto it = p.files.find(component);
  if (it == p.files.end() || it->second.empty()) return "";
  if (it->second.size() == 1) return rank == 0 ? it->second.front() : "";
  return static_cast<std::size_t>(rank) < it->second.size() ? it->second[static_cast<std::size_t>(rank)] : "";
}

}  // namespace

SaveCrossCheck cross_check_save(const std::string& worker, const PinnedStep& pinned,
                                const std::map<int, const WorkerLog*>& ranks) {
  SaveCrossCheck out;
  out.worker = worker;
  out.step = pinned.step;
  out.dir = pinned.dir;
  if (pinned.format != kHelperStateFormat) {
    out.not_checked.push_back("every component (" + pinned.dir +
                              " was not written by anchor_pilot's Pilot.save: its "
                              "state.json has format \"" +
                              pinned.format + "\", not \"" + kHelperStateFormat + "\")");
    return out;
  }
  std::set<std::string> noted;
  const auto note = [&](const std::string& what) {
    if (noted.insert(what).second) out.not_checked.push_back(what);
  };
  for (const auto& [rank, log] : ranks) {
    const DigestsLine* line = log ? log->digests_at("save", pinned.step) : nullptr;
    for (const auto& [component, files] : pinned.files) {
      const std::string file = file_of(pinned, component, rank);
      if (file.empty()) continue;
      if (pinned.dcp.count(component)) {
        note(component + " (sharded through DCP: each rank's digest is of its own shard)");
        continue;
      }
      const auto sha = pinned.sha256.find(file);
      if (sha == pinned.sha256.end()) {
        note(component + " (" + file + " is pinned per tensor, not whole)");
        continue;
      }
      const std::string* got = line ? line->find(component) : nullptr;
      ++out.compared;
      if (!got || *got != sha->second)
        out.contradictions.push_back({worker, rank, pinned.step, component, file, got ? *got : "", sha->second});
    }
    if (line)
      for (const auto& [component, digest] : line->components)
        if (!pinned.files.count(component))
          out.contradictions.push_back({worker, rank, pinned.step, component, "", digest, ""});
  }
  return out;
}

}  // namespace anchor::protocol
