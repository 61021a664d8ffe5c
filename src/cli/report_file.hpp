#pragma once
// A past pilot's report, as `anchor plan` and `anchor diff` read it: a
// report.json, a signed report.intoto.json (its payload's predicate.report;
// the signature is NOT checked here: `anchor verify` and `anchor reproduce`
// do that), or a run directory holding either. Throws Error (kUsage) saying
// what is wrong with the file.
#include <string>

#include <nlohmann/json.hpp>

namespace anchor::cli {

nlohmann::json read_report(std::string path);

}  // namespace anchor::cli
