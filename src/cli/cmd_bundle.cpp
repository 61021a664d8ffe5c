// anchor bundle RUN [-o DIR] [--with-data] [--key PUB] [--json]
//
// Writes a reproduction bundle of a signed run: the directory `anchor
// reproduce DIR` takes on another node (docs/report.md, "Reproduction
// bundles"). Needs no LibTorch. Exit 0 written, 3 the run does not verify or
// a file changed since it was signed, 2 usage, 1 file system.
#include <cstdio>
#include <iostream>
#include <memory>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/reproduce/bundle.hpp"
#include "commands.hpp"

namespace anchor::cli {

Runner setup_bundle(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<reproduce::BundleOptions>();
  auto json_out = std::make_shared<bool>(false);
  sub.add_option("run", o->run, "a signed run: its directory (or its report.intoto.json)")
      ->type_name("PATH")
      ->required();
  sub.add_option("-o,--output", o->output,
                 "the bundle directory to write; it must not exist (default: <run-id>.bundle here)")
      ->type_name("DIR");
  sub.add_flag("--with-data", o->with_data,
               "also carry the run's model and data files (each checked against the signed manifest's digest)");
  sub.add_option("--key", o->key,
                 "the signer's public key (SPKI PEM) the report must verify with (default: report.pub beside it, "
                 "which shows integrity, not who signed)")
      ->type_name("FILE");
  sub.add_flag("--json", *json_out, "print {bundle, files, inputs, bytes, seconds, key_id, warnings} on stdout");
  sub.footer(
      "Exit codes: 0 written, 3 the run does not verify or a file changed since it was signed, 2 usage, "
      "1 file system. Reproduce it with `anchor reproduce DIR` (docs/report.md, \"Reproduction bundles\").");
  return [o, json_out]() {
    const auto r = reproduce::write_bundle(*o);
    for (const auto& w : r.warnings) std::cerr << "bundle: warn  " << w << "\n";
    if (*json_out) {
      std::cout << dump_json({{"bundle", printable(r.dir)},
                              {"files", r.files},
                              {"inputs", r.inputs},
                              {"bytes", r.bytes},
                              {"seconds", r.seconds},
                              {"key_id", r.key_id},
                              {"warnings", r.warnings}},
                             2)
                << std::endl;
    }
    std::fprintf(stderr, "bundle: wrote %s: %zu files, %.1f MB%s, in %.2f s\n", printable(r.dir).c_str(), r.files,
                 static_cast<double>(r.bytes) / 1e6,
                 o->with_data ? (", " + std::to_string(r.inputs) + " of them the run's inputs").c_str()
                              : " (no data: a reproduction finds the inputs itself, --root/--map)",
                 r.seconds);
    std::fprintf(stderr, "bundle: reproduce it with: anchor reproduce %s\n", printable(r.dir).c_str());
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
