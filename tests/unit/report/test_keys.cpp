#include "anchor/report/keys.hpp"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

#include "anchor/error.hpp"
#include "anchor/report/dsse.hpp"
#include "run_fixture.hpp"

namespace anchor::report {
namespace {

namespace stdfs = std::filesystem;

using testing::file_mode;
using testing::sh;
using testing::sh_quote;
using testing::slurp;
using testing::spit;

class KeysTest : public testing::RunDirTest {};

// Unsets ANCHOR_KEY_PASSPHRASE for a test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST_F(KeysTest, KeygenWritesPkcs8AndSpkiWithTheRightModes) {
  EXPECT_EQ(file_mode(priv_), 0600u);
  // 0644 less the umask: never more than 0644, and others never write.
  EXPECT_EQ(file_mode(pub_) & ~0644u, 0u);
  std::string priv = slurp(priv_);
  EXPECT_EQ(priv.rfind("-----BEGIN PRIVATE KEY-----", 0), 0u) << "unencrypted PKCS#8";
  EXPECT_EQ(slurp(pub_).rfind("-----BEGIN PUBLIC KEY-----", 0), 0u) << "SPKI";
  // No temp files left beside them.
  std::size_t n = 0;
  for (const auto& e : stdfs::directory_iterator(keys_)) (void)e, ++n;
  EXPECT_EQ(n, 2u);
  // openssl reads both as an EC P-256 key pair.
  auto r = sh("/usr/bin/openssl pkey -in " + sh_quote(priv_) + " -noout -text");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("prime256v1"), std::string::npos) << r.out;
}

// The key id is securesystemslib's default keyid; docs/report.md ("Key id") gives this shell recipe for it.
// (tests/interop/verify_attestation.py checks it against securesystemslib itself.) The older id, which
// verify still accepts, is the SHA-256 of the DER SPKI as openssl prints it.
TEST_F(KeysTest, KeyIdIsSecuresystemslibsDefaultKeyidAsTheDocsComputeIt) {
  auto recipe =
      sh("printf '{\"keytype\":\"ecdsa\",\"keyval\":{\"public\":\"%s\\n\"},\"scheme\":\"ecdsa-sha2-nistp256\"}' "
         "\"$(cat " +
         sh_quote(pub_) + ")\" | sha256sum | cut -d' ' -f1");
  ASSERT_EQ(recipe.status, 0) << recipe.out;
  EXPECT_EQ(key_id_ + "\n", recipe.out);
  std::string der = keys_ + "/pub.der";
  auto r = sh("/usr/bin/openssl pkey -pubin -in " + sh_quote(pub_) + " -outform DER -out " + sh_quote(der));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(legacy_key_id(load_public_key(pub_)), sha256_hex(slurp(der)));
  EXPECT_NE(legacy_key_id(load_public_key(pub_)), key_id_);
  EXPECT_EQ(key_id(load_public_key(pub_)), key_id_);
  EXPECT_EQ(key_id(load_private_key(priv_)), key_id_);
  // Negative control: another key has another id.
  auto [other_priv, other_pub] = other_keypair();
  EXPECT_NE(key_id(load_public_key(other_pub)), key_id_);
}

TEST_F(KeysTest, GroupOrOtherReadablePrivateKeyIsRefusedWithTheFix) {
  ASSERT_EQ(::chmod(priv_.c_str(), 0644), 0);
  try {
    load_private_key(priv_);
    FAIL() << "a 0644 private key was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("mode 0644"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint(), "chmod 600 " + priv_);
  }
  ASSERT_EQ(::chmod(priv_.c_str(), 0640), 0);
  EXPECT_THROW(load_private_key(priv_), Error);
  // Negative control: after the fix it loads.
  ASSERT_EQ(::chmod(priv_.c_str(), 0600), 0);
  EXPECT_NO_THROW(load_private_key(priv_));
  ASSERT_EQ(::chmod(priv_.c_str(), 0400), 0);
  EXPECT_NO_THROW(load_private_key(priv_));
}

TEST_F(KeysTest, ExistingKeysAreNotOverwrittenWithoutForce) {
  std::string before = slurp(priv_);
  KeygenOptions k;
  k.private_path = priv_;
  k.public_path = keys_ + "/fresh.pub";
  try {
    write_keypair(k);
    FAIL() << "overwrote an existing private key";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos);
    EXPECT_NE(e.hint().find("--force"), std::string::npos);
  }
  EXPECT_EQ(slurp(priv_), before);
  EXPECT_FALSE(stdfs::exists(k.public_path)) << "half a key pair was written";
  // --force replaces both, and the new pair matches.
  k.public_path = pub_;
  k.force = true;
  std::string id = write_keypair(k).key_id;
  EXPECT_NE(slurp(priv_), before);
  EXPECT_NE(id, key_id_);
  EXPECT_EQ(key_id(load_private_key(priv_)), id);
  EXPECT_EQ(key_id(load_public_key(pub_)), id);
  EXPECT_EQ(file_mode(priv_), 0600u);
}

TEST_F(KeysTest, PassphraseEncryptedKeyRoundTrip) {
  ScopedEnv env(kPassphraseEnv, nullptr);
  KeygenOptions k;
  k.private_path = keys_ + "/enc.key";
  k.public_path = keys_ + "/enc.pub";
  k.passphrase = "correct horse battery staple";
  KeygenResult r = write_keypair(k);
  EXPECT_TRUE(r.encrypted);
  std::string pem = slurp(k.private_path);
  EXPECT_EQ(pem.rfind("-----BEGIN ENCRYPTED PRIVATE KEY-----", 0), 0u);
  EXPECT_EQ(pem.find(k.passphrase), std::string::npos);
  EXPECT_EQ(file_mode(k.private_path), 0600u);

  // openssl confirms PKCS#8 with AES-256-CBC (PBES2).
  spit(keys_ + "/pass.txt", k.passphrase + "\n");
  auto o = sh("/usr/bin/openssl pkey -in " + sh_quote(k.private_path) +
              " -passin file:" + sh_quote(keys_ + "/pass.txt") + " -noout");
  EXPECT_EQ(o.status, 0) << o.out;
  auto asn = sh("/usr/bin/openssl asn1parse -in " + sh_quote(k.private_path));
  EXPECT_NE(asn.out.find("aes-256-cbc"), std::string::npos) << asn.out;

  // No passphrase: refused with the two prompt-free ways, never a prompt.
  try {
    load_private_key(k.private_path, "");
    FAIL() << "an encrypted key loaded without a passphrase";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encrypted"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find(kPassphraseEnv), std::string::npos);
    EXPECT_NE(e.hint().find("--passphrase-file"), std::string::npos);
  }
  // Wrong passphrase: refused.
  try {
    load_private_key(k.private_path, "wrong");
    FAIL() << "an encrypted key loaded with a wrong passphrase";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong passphrase"), std::string::npos) << e.what();
  }
  // Right passphrase, from the file and from the environment.
  EXPECT_EQ(resolve_passphrase(keys_ + "/pass.txt"), k.passphrase);
  EXPECT_EQ(key_id(load_private_key(k.private_path, resolve_passphrase(keys_ + "/pass.txt"))), r.key_id);
  {
    ScopedEnv set(kPassphraseEnv, k.passphrase.c_str());
    EXPECT_EQ(resolve_passphrase(""), k.passphrase);
    Key loaded = load_private_key(k.private_path, resolve_passphrase(""));
    // The loaded key signs what the public key verifies.
    std::string sig = sign(loaded, "m");
    EXPECT_TRUE(verify(load_public_key(k.public_path), "m", sig));
  }
  EXPECT_EQ(resolve_passphrase(""), "");
}

TEST_F(KeysTest, PassphraseFileRules) {
  spit(keys_ + "/crlf.txt", "secret\r\nsecond line\n");
  EXPECT_EQ(resolve_passphrase(keys_ + "/crlf.txt"), "secret");
  spit(keys_ + "/empty.txt", "\n");
  EXPECT_THROW(resolve_passphrase(keys_ + "/empty.txt"), Error);
  EXPECT_THROW(resolve_passphrase(keys_ + "/absent.txt"), Error);
}

TEST_F(KeysTest, OnlyP256KeysAreAccepted) {
  std::string ed = keys_ + "/ed.key";
  auto r = sh("/usr/bin/openssl genpkey -algorithm ed25519 -out " + sh_quote(ed));
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(::chmod(ed.c_str(), 0600), 0);
  try {
    load_private_key(ed);
    FAIL() << "an ed25519 key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an ECDSA P-256 key"), std::string::npos) << e.what();
  }
  std::string p384 = keys_ + "/p384.key";
  r = sh("/usr/bin/openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out " + sh_quote(p384));
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(::chmod(p384.c_str(), 0600), 0);
  EXPECT_THROW(load_private_key(p384), Error);
  // A key made by the openssl command line (P-256) is accepted: a negative control.
  std::string p256 = keys_ + "/p256.key";
  r = sh("/usr/bin/openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " + sh_quote(p256));
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(::chmod(p256.c_str(), 0600), 0);
  EXPECT_NO_THROW(load_private_key(p256));
}

TEST_F(KeysTest, PublicAndPrivateFilesAreNotMixedUp) {
  try {
    load_public_key(priv_);
    FAIL() << "a private key file was taken as a public key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a private key"), std::string::npos);
  }
  ASSERT_EQ(::chmod(pub_.c_str(), 0600), 0);
  EXPECT_THROW(load_private_key(pub_), Error);
  spit(keys_ + "/junk.pub", "not a key\n");
  EXPECT_THROW(load_public_key(keys_ + "/junk.pub"), Error);
}

TEST_F(KeysTest, ErrorsNeverCarryKeyMaterial) {
  std::string pem = slurp(priv_);
  std::string body = pem.substr(pem.find('\n') + 1, 40);  // base64 of the key
  ASSERT_EQ(::chmod(priv_.c_str(), 0644), 0);
  try {
    load_private_key(priv_);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find(body), std::string::npos);
    EXPECT_EQ(e.hint().find(body), std::string::npos);
  }
}

}  // namespace
}  // namespace anchor::report

namespace anchor::report {
namespace {

// The per-user key (docs/report.md, "Signing"): made on first use under
// $XDG_CONFIG_HOME/anchor, then the same key every time.
class UserKeyTest : public testing::RunDirTest {
 protected:
  std::string xdg() const { return (root_ / "xdg").string(); }
};

TEST_F(UserKeyTest, MadeOnFirstUseWithPrivateModesThenReused) {
  ScopedEnv x("XDG_CONFIG_HOME", xdg().c_str());
  ScopedEnv p(kPassphraseEnv, nullptr);
  const UserKey first = ensure_user_key();
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.private_path, xdg() + "/anchor/anchor.key");
  EXPECT_EQ(first.public_path, xdg() + "/anchor/anchor.pub");
  EXPECT_EQ(file_mode(first.private_path), 0600u);
  EXPECT_EQ(file_mode(xdg() + "/anchor"), 0700u);
  EXPECT_EQ(file_mode(xdg()), 0700u);  // XDG_CONFIG_HOME itself was missing: made 0700 too
  EXPECT_EQ(key_id(load_public_key(first.public_path)), first.key_id);
  const UserKey again = ensure_user_key();
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.key_id, first.key_id);
  // A missing anchor.pub is written again from the key; a foreign one is refused.
  stdfs::remove(first.public_path);
  EXPECT_EQ(ensure_user_key().key_id, first.key_id);
  EXPECT_EQ(key_id(load_public_key(first.public_path)), first.key_id);
  stdfs::copy_file(pub_, first.public_path, stdfs::copy_options::overwrite_existing);
  try {
    ensure_user_key();
    ADD_FAILURE() << "a public key of another key pair was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("is not the public half of"), std::string::npos) << e.what();
  }
}

TEST_F(UserKeyTest, WithoutXdgConfigHomeItLivesUnderHomeAndNeedsOne) {
  ScopedEnv x("XDG_CONFIG_HOME", "relative/ignored");  // the XDG spec: only an absolute path counts
  ScopedEnv h("HOME", (root_ / "home").string().c_str());
  EXPECT_EQ(user_key_paths().private_path, (root_ / "home/.config/anchor/anchor.key").string());
  ScopedEnv no_home("HOME", nullptr);
  try {
    user_key_paths();
    ADD_FAILURE() << "no HOME and no XDG_CONFIG_HOME gave a key path";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.hint().find("set HOME or XDG_CONFIG_HOME"), std::string::npos) << e.hint();
  }
}

TEST_F(UserKeyTest, AKeyOthersCanReadIsRefusedNotReplaced) {
  ScopedEnv x("XDG_CONFIG_HOME", xdg().c_str());
  ScopedEnv p(kPassphraseEnv, nullptr);
  const UserKey k = ensure_user_key();
  ::chmod(k.private_path.c_str(), 0644);
  const std::string before = slurp(k.private_path);
  EXPECT_THROW(ensure_user_key(), Error);
  EXPECT_EQ(slurp(k.private_path), before);
}

// With ANCHOR_KEY_PASSPHRASE set the key is made encrypted; later runs need it.
TEST_F(UserKeyTest, APassphraseEncryptsTheKeyAndIsThenNeeded) {
  ScopedEnv x("XDG_CONFIG_HOME", xdg().c_str());
  {
    ScopedEnv p(kPassphraseEnv, "correct horse");
    const UserKey k = ensure_user_key();
    EXPECT_TRUE(k.created);
    EXPECT_NE(slurp(k.private_path).find("BEGIN ENCRYPTED PRIVATE KEY"), std::string::npos);
    EXPECT_EQ(ensure_user_key().key_id, k.key_id);
  }
  ScopedEnv none(kPassphraseEnv, nullptr);
  try {
    ensure_user_key();
    ADD_FAILURE() << "an encrypted key loaded without its passphrase";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("encrypted, and no passphrase given"), std::string::npos) << e.what();
  }
}

// A key directory someone else could write is refused, not used.
TEST_F(UserKeyTest, AKeyDirectoryOthersCanWriteOrALinkedKeyIsRefused) {
  ScopedEnv x("XDG_CONFIG_HOME", xdg().c_str());
  ScopedEnv p(kPassphraseEnv, nullptr);
  const UserKey k = ensure_user_key();
  ::chmod((xdg() + "/anchor").c_str(), 0777);
  try {
    ensure_user_key();
    ADD_FAILURE() << "a world-writable key directory was used";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("writable by others (mode 0777)"), std::string::npos) << e.what();
  }
  ::chmod((xdg() + "/anchor").c_str(), 0700);
  EXPECT_EQ(ensure_user_key().key_id, k.key_id);  // the control: put right, it is used again
  stdfs::remove(k.private_path);
  stdfs::create_symlink(priv_, k.private_path);  // another key of this user, by a link
  EXPECT_THROW(ensure_user_key(), Error);
}

// Ranks or pilots started at once on a fresh machine: one key, made once.
TEST_F(UserKeyTest, ProcessesStartingAtOnceAgreeOnOneKey) {
  ScopedEnv x("XDG_CONFIG_HOME", xdg().c_str());
  ScopedEnv p(kPassphraseEnv, nullptr);
  constexpr int kProcs = 8;
  int pipes[kProcs][2], go[2];
  pid_t pids[kProcs];
  ASSERT_EQ(::pipe(go), 0);  // the start line: every child waits until it closes
  for (int i = 0; i < kProcs; ++i) {
    ASSERT_EQ(::pipe(pipes[i]), 0);
    pids[i] = ::fork();
    ASSERT_GE(pids[i], 0);
    if (pids[i] == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);
      std::string line;
      try {
        const UserKey k = ensure_user_key();
        line = (k.created ? "1 " : "0 ") + k.key_id;
      } catch (const std::exception& e) {
        line = std::string("E ") + e.what();
      }
      (void)!::write(pipes[i][1], line.data(), line.size());
      ::_exit(0);
    }
    ::close(pipes[i][1]);
  }
  ::close(go[0]);
  ::close(go[1]);
  std::set<std::string> ids;
  int made = 0;
  for (int i = 0; i < kProcs; ++i) {
    std::string out;
    char buf[256];
    for (ssize_t n; (n = ::read(pipes[i][0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(pipes[i][0]);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    ASSERT_GE(out.size(), 2u) << "process " << i;
    ASSERT_NE(out[0], 'E') << out;
    made += out[0] == '1';
    ids.insert(out.substr(2));
  }
  EXPECT_EQ(made, 1);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(*ids.begin(), key_id(load_public_key(xdg() + "/anchor/anchor.pub")));
}

}  // namespace
}  // namespace anchor::report
