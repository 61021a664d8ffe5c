#pragma once
// The pipeline stages a config gives as commands, timed on a sample (issue
// 44, item 7; docs/plan.md, "Download and preprocess"): budget.download_command
// fetches a sample into {out}; budget.preprocess_command turns
// budget.preprocess_sample (else the downloaded sample) at {in} into {out}.
// Each is run once, timed, and its rate (bytes of the sample per second)
// extrapolated by size to budget.download_gb in the plan, as MEASURED. Torch-free.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::pilot {

// argv with every "{in}" and "{out}" replaced (inside an argument too:
// "--out={out}/x"). No shell: a command that wants one names it (sh -c ...).
std::vector<std::string> substitute(const std::vector<std::string>& argv, const std::string& in,
                                    const std::string& out);

// The bytes under `path`: a file's size, or a directory's files' sizes
// summed (symbolic links not followed). 0 when it does not exist.
double bytes_under(const std::string& path);

// Whether the config names a download or preprocess command.
bool pipeline_configured(const config::Config& cfg);

// Runs the configured commands in the config file's directory, each with a
// fresh {out} under `work_dir` (removed afterwards: a sample's output is not
// kept) and its output in <work_dir>/<stage>.log; returns {"download": {...},
// "preprocess": {...}} for those configured: command (as run), seconds,
// bytes (download: what it wrote to {out}; preprocess: its input at {in}),
// mb_per_s, log, kind MEASURED. Throws Error (kRuntime) naming a command that
// exits non-zero or outlives budget.pipeline_timeout_s (killed with its
// process group), with its output's last lines; Error (kConfig) for a
// sample that is missing or empty.
nlohmann::json time_pipeline(const config::Config& cfg, const std::string& work_dir);

}  // namespace anchor::pilot
