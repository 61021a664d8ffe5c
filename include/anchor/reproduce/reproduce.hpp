#pragma once
// `anchor reproduce`: re-running a past pilot from its report, and comparing
// the re-run with the report it reproduces, stage by stage.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/error.hpp"

namespace anchor::pilot {
struct PilotOptions;
}  // namespace anchor::pilot

namespace anchor::reproduce {

using pilot::PilotOptions;

// What `anchor reproduce` is asked (its command line, docs/report.md).
struct ReproduceOptions {
  // report.intoto.json of a past run, a report.json (with allow_unsigned), or
  // a bundle directory (`anchor bundle`).
  std::string report;
  std::string key;                 // the signer's SPKI PEM; empty: report.pub beside the report
  std::string run_dir;             // empty: runs/<run-id> under the current directory
  std::string checkpoint_dir;      // empty: <run dir>/checkpoints
  std::string signing_key;         // signs the re-run; empty: the per-user key; "none": unsigned
  std::string root;                // where the config's directory is now (its relative inputs)
  std::vector<std::string> map;    // OLD=NEW: recorded absolute path prefixes and where they are now
  bool allow_drift = false;        // re-run even when pins drifted
  bool allow_unsigned = false;     // accept an unsigned report.json (loudly unverified)
  bool use_cache = true;           // the pin's hash cache
  bool json = false;               // the new report.json on stdout
  std::string junit;               // a JUnit XML file for the re-run
  std::string log_level = "info";  // passed on to the workers
  std::string worker_binary;       // the workers' executable (anchor-torch)
  // Runs the re-run's pilot and returns its exit code: the binary's
  // (pilot::run_pilot needs LibTorch; this library code does not). Required.
  std::function<ExitCode(const PilotOptions&)> run_pilot;
};

// Reproduces a past run: opens the bundle (every file it lists checked
// first), verifies the report's signature (or, with allow_unsigned, reads a
// report.json unverified), locates the run's inputs (--root, --map, the
// bundle's), re-pins them against the recorded manifest and prints the
// drift, then re-runs the pilot with the recorded effective config and seeds
// in a new run directory through opts.run_pilot, which compares the results
// with the report (bitwise on the CPU with no drift, else within the
// recorded tolerance). Informational lines go to stderr unless the log level
// is above info; warnings and the drift table always.
// Returns the re-run's exit code (ExitCode: kOk reproduced, kVerification
// not reproduced, ...). Throws Error before the re-run starts: kVerification
// for a report that does not verify, drift without allow_drift, a bundle
// that does not match its report, or a field of a type anchor does not write;
// kUsage/kConfig for what cannot be reproduced (a program pilot, a pilot
// started from a checkpoint) or a bad --root; kIo/kConfig for an input not
// found, with a hint naming --root and --map.
ExitCode run(const ReproduceOptions& opts);

}  // namespace anchor::reproduce
