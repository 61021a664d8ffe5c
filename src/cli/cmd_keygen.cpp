// anchor keygen [-o DIR | --private PATH [--public PATH]] [--passphrase-file F] [--force]
//
// Prints the key id (hex SHA-256 of the DER public key) on stdout; paths and
// modes go to stderr. Key material is never printed.
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <memory>

#include <openssl/crypto.h>

#include <nlohmann/json.hpp>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/keys.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct KeygenCliOptions {
  std::string out_dir;
  std::string private_path;
  std::string public_path;
  std::string passphrase_file;
  bool force = false;
  bool json = false;
};

// "x/signing.key" -> "x/signing.pub"; "x/key.pem" -> "x/key.pem.pub".
std::string default_public_path(const std::string& private_path) {
  std::filesystem::path p(private_path);
  if (p.extension() == ".key") return p.replace_extension(".pub").string();
  return private_path + ".pub";
}

}  // namespace

Runner setup_keygen(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<KeygenCliOptions>();
  auto* dir = sub.add_option("-o,--out-dir", o->out_dir,
                             "write DIR/anchor.key (mode 0600) and DIR/anchor.pub (0644); "
                             "DIR is created (0700) when missing")
                  ->type_name("DIR");
  auto* priv = sub.add_option("--private", o->private_path, "private key path (PKCS#8 PEM, created mode 0600)")
                   ->type_name("FILE");
  sub.add_option("--public", o->public_path, "public key path (SPKI PEM, 0644); default: the private path with .pub")
      ->type_name("FILE")
      ->needs(priv);
  dir->excludes(priv);
  sub.add_option("--passphrase-file", o->passphrase_file,
                 "encrypt the private key (AES-256-CBC) with the first line of this file; "
                 "default: $ANCHOR_KEY_PASSPHRASE if set, else unencrypted")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  sub.add_flag("--force", o->force, "replace existing key files (default: refuse)");
  sub.add_flag("--json", o->json,
               "print {key_id, private_key, public_key, encrypted} as JSON on stdout instead of the key id");
  sub.footer("Prints the key id (hex SHA-256 of the DER SubjectPublicKeyInfo) on stdout.");

  return [o]() {
    report::KeygenOptions k;
    k.force = o->force;
    if (!o->out_dir.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(o->out_dir, ec) && ::mkdir(o->out_dir.c_str(), 0700) != 0)
        throw io_error("mkdir", o->out_dir, errno);
      k.private_path = (std::filesystem::path(o->out_dir) / "anchor.key").string();
      k.public_path = (std::filesystem::path(o->out_dir) / "anchor.pub").string();
    } else if (!o->private_path.empty()) {
      k.private_path = o->private_path;
      k.public_path = o->public_path.empty() ? default_public_path(o->private_path) : o->public_path;
    } else {
      throw Error(ErrorKind::kUsage, "keygen: where should the keys go?",
                  "pass -o DIR, or --private PATH [--public PATH]");
    }
    k.passphrase = report::resolve_passphrase(o->passphrase_file);
    report::KeygenResult r = report::write_keypair(k);
    if (!k.passphrase.empty()) OPENSSL_cleanse(k.passphrase.data(), k.passphrase.size());
    std::cerr << "anchor: wrote private key " << k.private_path << " (mode 0600, "
              << (r.encrypted ? "encrypted with AES-256-CBC" : "not encrypted") << ")\n"
              << "anchor: wrote public key  " << k.public_path << " (mode 0644)\n";
    if (o->json) {
      const nlohmann::json out = {{"key_id", r.key_id},
                                  {"private_key", printable(std::filesystem::absolute(k.private_path).string())},
                                  {"public_key", printable(std::filesystem::absolute(k.public_path).string())},
                                  {"encrypted", r.encrypted}};
      std::cout << dump_json(out, 2) << std::endl;
      return ExitCode::kOk;
    }
    std::cout << r.key_id << "\n";
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
