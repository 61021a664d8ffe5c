#include "anchor/pilot/observed.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"

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

nlohmann::json hashed_save(const std::string& ckpt_dir, std::int64_t step, const std::vector<std::string>& files) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files) {
    const auto d = sha256_file((std::filesystem::path(ckpt_dir) / f).string());
    list.push_back({{"path", printable(f)}, {"bytes", d.size}, {"sha256", d.sha256}});
  }
  return {{"step", step}, {"files", list}};
}

}  // namespace anchor::pilot::observed
