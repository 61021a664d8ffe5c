#pragma once
// A reproduction bundle (`anchor bundle RUN`, `anchor reproduce BUNDLE`;
// docs/report.md, "Reproduction bundles"): one directory holding what
// reproducing a signed run on another node needs, each file by digest.
//
//   bundle.json          what the bundle holds: every other file's size and SHA-256
//   report.intoto.json   the signed report, as it verified
//   report.pub           the key it verified with
//   provenance.intoto.json, report.json, manifest.json, config.json,
//   report.md, report.html   those of the run's, each checked against its signed digest
//   catalog.yaml         the device catalog the run planned with (its digest is in the report)
//   inputs/              with --with-data: the run's model and data files, relative
//                        ones under inputs/tree/ (the config directory's place),
//                        absolute ones under inputs/abs/<their path>
//
// bundle.json is not signed: its digests catch a copy that lost or changed
// bytes. What a reproduction trusts comes from the signed report: the inputs
// are pinned again and compared with its manifest, the catalog with the digest
// its plan records.
#include <cstdint>
#include <optional>
#include <utility>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anchor/manifest/path_map.hpp"
#include "anchor/run_report/run_report.hpp"

namespace anchor::reproduce {

inline constexpr const char* kBundleFile = "bundle.json";
inline constexpr const char* kBundleFormat = "anchor.bundle/v1";

struct BundleOptions {
  std::string run;     // a run directory, or its report.intoto.json
  std::string output;  // the bundle directory to make: it must not exist, its parent must
  std::string key;     // SPKI PEM key the report must verify with; empty: report.pub beside it
  bool with_data = false;
};

struct BundleResult {
  std::string dir;
  std::size_t files = 0;   // besides bundle.json
  std::size_t inputs = 0;  // of them, the run's model and data files (--with-data)
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::string key_id;                 // the key the report verified with
  std::vector<std::string> warnings;  // verify's, and what the bundle could not carry
};

// Verifies the run (as `anchor verify` does, with its files), then writes the
// bundle whole or not at all (fs::copy_verified: a sibling temporary
// directory, every file fsynced and checked at the destination, one rename).
// Throws Error: kUsage for a run that is not a signed run directory or an
// output that exists, kVerification for a run that does not verify or a file
// that is no longer what the report signed (a changed input, a changed
// catalog), kIo for the file system.
BundleResult write_bundle(const BundleOptions& opts);

// Whether `path` is a directory holding bundle.json: what `anchor reproduce`
// reads as a bundle rather than a report.
bool is_bundle(const std::string& path);

// Where a bundle carries the run's inputs, from the signed manifest alone,
// relative to the bundle: `root` the config directory's place under
// inputs/tree ("" when no input is relative), `absolute` the directory the
// absolute inputs sit under by their own path ("" when none). write_bundle
// places them so; a reproduction requires bundle.json to say the same.
struct InputPlaces {
  std::string root;
  std::string absolute;
};
InputPlaces input_places(const nlohmann::json& manifest);

// The catalog a signed report's plan records ({path, sha256}: a non-empty
// path and a SHA-256), or nullopt: one rule for the bundle and its reader.
std::optional<std::pair<std::string, std::string>> recorded_catalog(const run_report::RunReport& report);

struct OpenedBundle {
  std::string dir;         // absolute
  std::string envelope;    // <dir>/report.intoto.json
  std::string public_key;  // <dir>/report.pub
  std::string catalog;     // <dir>/catalog.yaml; empty: the bundle carries none
  bool with_data = false;
  manifest::PathMap inputs;  // with_data: where the run's inputs are inside the bundle
  InputPlaces places;        // with_data: the same, as bundle.json names them (relative)
  // Every file bundle.json lists, name -> SHA-256 (their bytes checked): the run's signed subjects
  // among them are held to the envelope's digests once it verifies (check_signed_subjects).
  std::map<std::string, std::string> files;
};

// The bundle's files that the verified envelope's statement signs (its
// subjects) against their signed SHA-256: one that differs was changed after
// signing, with bundle.json made to agree (Error kVerification).
void check_signed_subjects(const OpenedBundle& b, const std::string& verified_envelope_text);

// Reads bundle.json strictly (its format, every name a relative path inside
// the bundle, no symbolic link on the way) and checks every file it lists by
// size and SHA-256. Throws Error: kUsage for what is not a bundle or a bundle
// of another format, kVerification for a file missing, added to the inputs or
// changed.
OpenedBundle open_bundle(const std::string& dir);

}  // namespace anchor::reproduce
