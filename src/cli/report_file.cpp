#include "report_file.hpp"

#include <filesystem>

#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/dsse.hpp"

namespace anchor::cli {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

nlohmann::json read_report(std::string path) {
  if (stdfs::is_directory(path)) {
    if (stdfs::exists(stdfs::path(path) / "report.json"))
      path = (stdfs::path(path) / "report.json").string();
    else
      path = (stdfs::path(path) / "report.intoto.json").string();
  }
  const std::string text = fs::read_file(path);
  // parse_json: a hostile file nested a million levels deep is refused, not a stack overflow.
  const auto parse = [](const std::string& t) {
    try {
      return parse_json(t);
    } catch (const json::exception&) {
      return json(json::value_t::discarded);
    }
  };
  json j = parse(text);
  if (j.is_discarded() || !j.is_object())
    throw Error(ErrorKind::kUsage, "report " + path + ": not a JSON object (or nested deeper than anchor writes)",
                "give the pilot's report.json or report.intoto.json");
  if (j.contains("payloadType")) {
    const report::Envelope env = report::envelope_from_json(text);
    json statement = parse(env.payload);
    const json::json_pointer p("/predicate/report");
    if (statement.is_discarded() || !statement.contains(p) || !statement.at(p).is_object())
      throw Error(ErrorKind::kUsage, "report " + path + ": the envelope's payload has no predicate.report object",
                  "give a report.intoto.json written by `anchor pilot`");
    return statement.at(p);
  }
  return j;
}

}  // namespace anchor::cli
