#pragma once
// SLSA Provenance v1 for a signed run, beside anchor's own statement.
//
//   <run_dir>/provenance.intoto.json   DSSE envelope over an in-toto Statement
//                                      v1 whose predicate is SLSA Provenance v1
//
// It is derived from the signed report statement alone (report.json, with the
// manifest pinned before training, is its predicate): the same subjects, the
// effective config as external parameters, the pinned model, data, shared
// libraries, Python distributions and container as resolved dependencies, the
// anchor-torch binary as the builder's dependency, and the report envelope
// itself as a byproduct, which binds the two. `anchor verify` rebuilds it from
// the verified report statement and refuses one that differs. docs/report.md,
// "SLSA provenance", lists every field.
#include <string>

#include <nlohmann/json.hpp>

namespace anchor::report {

inline constexpr const char* kProvenanceFile = "provenance.intoto.json";
inline constexpr const char* kSlsaProvenanceType = "https://slsa.dev/provenance/v1";
// Ours, versioned like the report predicate: a change to how a run maps onto
// the provenance's fields gets /v2.
inline constexpr const char* kPilotBuildType = "https://anchor.dev/pilot/v1";
inline constexpr const char* kBuilderId = "https://anchor.dev/builder/anchor";

// The provenance statement for a report statement (as signed in
// report.intoto.json) whose envelope file has SHA-256 `report_envelope_sha256`.
// Reads nothing from disk. Fields the report lacks (an unpinned run has no
// manifest) are left out, never invented. Throws Error (kRuntime) when the
// statement has no subject array or no predicate.report object.
nlohmann::ordered_json build_provenance(const nlohmann::json& report_statement,
                                        const std::string& report_envelope_sha256);

}  // namespace anchor::report
