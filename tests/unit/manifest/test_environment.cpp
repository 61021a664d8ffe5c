#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <vector>

#include "../../support/run_anchor.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/environment.hpp"

namespace anchor::manifest {
namespace {

const std::string kGood = "sha256:" + std::string(64, 'a');

// Restores one environment variable on scope exit.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    const char* v = std::getenv(name);
    had_ = v != nullptr;
    if (had_) value_ = v;
  }
  ~EnvGuard() {
    if (had_)
      ::setenv(name_, value_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string value_;
};

ErrorKind kind_of(const std::function<void()>& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.kind();
  }
  return ErrorKind::kRuntime;  // "no error" is reported as a mismatch by callers
}

TEST(ContainerDigest, AcceptsSha256And64LowercaseHex) {
  EXPECT_EQ(validate_container_digest(kGood, "container.digest"), kGood);
  std::string mixed = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  EXPECT_EQ(validate_container_digest(mixed, "x"), mixed);
}

TEST(ContainerDigest, RejectsMalformedWithAClearConfigError) {
  for (const std::string& bad : std::vector<std::string>{std::string(64, 'a'),                    // no prefix
                                                         "sha256:" + std::string(63, 'a'),        // short
                                                         "sha256:" + std::string(65, 'a'),        // long
                                                         "sha256:" + std::string(64, 'A'),        // upper case
                                                         "sha256:" + std::string(63, 'a') + "g",  // not hex
                                                         "sha512:" + std::string(64, 'a'),        // wrong algorithm
                                                         std::string("myimage:latest")}) {
    std::string msg;
    EXPECT_EQ(kind_of([&] { validate_container_digest(bad, "container.digest"); }, &msg), ErrorKind::kConfig) << bad;
    EXPECT_NE(msg.find("container.digest"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64 lowercase hex"), std::string::npos) << msg;
  }
}

TEST(ContainerInfo, ConfigThenEnvironmentThenNone) {
  EnvGuard g("ANCHOR_CONTAINER_DIGEST");
  ::unsetenv("ANCHOR_CONTAINER_DIGEST");
  auto none = container_info("", false);
  EXPECT_TRUE(none["digest"].is_null());
  EXPECT_EQ(none["source"], "none");

  auto from_cfg = container_info(kGood, false);
  EXPECT_EQ(from_cfg["digest"], kGood);
  EXPECT_EQ(from_cfg["source"], "config");

  std::string env_digest = "sha256:" + std::string(64, 'b');
  ::setenv("ANCHOR_CONTAINER_DIGEST", env_digest.c_str(), 1);
  auto from_env = container_info("", true);
  EXPECT_EQ(from_env["digest"], env_digest);
  EXPECT_EQ(from_env["source"], "env");
  EXPECT_TRUE(from_env["required"].get<bool>());
  EXPECT_TRUE(from_env["containerised"].is_boolean());

  // Config and environment disagreeing is a contradiction, not a silent choice.
  std::string msg;
  EXPECT_EQ(kind_of([&] { container_info(kGood, false); }, &msg), ErrorKind::kConfig);
  EXPECT_NE(msg.find("ANCHOR_CONTAINER_DIGEST"), std::string::npos) << msg;

  ::setenv("ANCHOR_CONTAINER_DIGEST", "sha256:nothex", 1);
  EXPECT_EQ(kind_of([&] { container_info("", false); }, &msg), ErrorKind::kConfig);
  EXPECT_NE(msg.find("ANCHOR_CONTAINER_DIGEST"), std::string::npos) << msg;
}

TEST(ContainerInfo, RequiredWithoutDigestIsAConfigErrorWithHint) {
  EnvGuard g("ANCHOR_CONTAINER_DIGEST");
  ::unsetenv("ANCHOR_CONTAINER_DIGEST");
  try {
    container_info("", true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("container.required"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("ANCHOR_CONTAINER_DIGEST"), std::string::npos) << e.hint();
  }
  // Control: not required, no digest: fine.
  EXPECT_NO_THROW(container_info("", false));
}

// Podman's /run/.containerenv (as podman 4 writes it in a container run with --privileged; otherwise it
// holds only engine=): its imageid is the image's content-addressed id. Given as a file here; the real
// path is read by default.
TEST(ContainerInfo, ThePodmanImageIdIsDetectedAndRecordedButConfigAndEnvironmentComeFirst) {
  EnvGuard g("ANCHOR_CONTAINER_DIGEST");
  ::unsetenv("ANCHOR_CONTAINER_DIGEST");
  anchor::testing::TempDir t("containerenv");
  const std::string id(64, 'c'), file = t.str("containerenv");
  anchor::fs::atomic_write_file(file, "engine=\"podman-4.3.1\"\nname=\"pilot\"\nid=\"" + std::string(64, '9') +
                                          "\"\nimage=\"localhost/anchor:latest\"\nimageid=\"" + id +
                                          "\"\nrootless=1\n");
  const auto d = detect_container_image(file);
  EXPECT_EQ(d.digest, "sha256:" + id);
  EXPECT_EQ(d.source, "podman");
  EXPECT_EQ(d.image, "localhost/anchor:latest");
  // container.required holds with only the runtime's word.
  const auto j = container_info("", true, file);
  EXPECT_EQ(j["digest"], "sha256:" + id);
  EXPECT_EQ(j["source"], "podman");
  EXPECT_EQ(j["detected"]["image"], "localhost/anchor:latest");
  // The config's digest (a registry digest, say) wins, and the detected id is still recorded.
  const auto cfg = container_info(kGood, true, file);
  EXPECT_EQ(cfg["digest"], kGood);
  EXPECT_EQ(cfg["source"], "config");
  EXPECT_EQ(cfg["detected"]["digest"], "sha256:" + id);
  // Controls: no file, or an id that is not a SHA-256, detect nothing; required then refuses, naming the file.
  EXPECT_TRUE(detect_container_image(t.str("absent")).digest.empty());
  anchor::fs::atomic_write_file(file, "engine=\"podman-4.3.1\"\nimageid=\"short\"\n");
  EXPECT_TRUE(detect_container_image(file).digest.empty());
  EXPECT_TRUE(container_info("", false, file)["detected"].is_null());
  // Buildah writes the same keys during a build (imageid: the FROM image's, not this one's): not taken.
  anchor::fs::atomic_write_file(
      file, "engine=\"buildah-1.28.2\"\nimage=\"docker.io/library/debian:12\"\nimageid=\"" + id + "\"\n");
  EXPECT_TRUE(detect_container_image(file).digest.empty());
  // Nor a file without the engine line, nor a FIFO there (not read: no hang).
  anchor::fs::atomic_write_file(file, "imageid=\"" + id + "\"\n");
  EXPECT_TRUE(detect_container_image(file).digest.empty());
  ASSERT_EQ(::mkfifo(t.str("fifo").c_str(), 0600), 0);
  EXPECT_TRUE(detect_container_image(t.str("fifo")).digest.empty());
  try {
    container_info("", true, file);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

// This test binary is torch-free (the manifest module is, build.torch_boundary):
// the library it links besides libc is OpenSSL's libcrypto (the hashing).
TEST(LoadedLibraries, ContainLibcAndLibcryptoButNotTheExecutable) {
  auto libs = loaded_shared_libraries();
  bool libc = false, crypto = false;
  for (const auto& l : libs) {
    std::string base = l.path.substr(l.path.rfind('/') + 1);
    libc = libc || base.rfind("libc.so", 0) == 0 || base.rfind("libc-", 0) == 0;
    crypto = crypto || base.rfind("libcrypto.so", 0) == 0;
    EXPECT_EQ(l.path.find("test_manifest"), std::string::npos) << l.path;
    EXPECT_EQ(l.path[0], '/') << l.path;
  }
  EXPECT_TRUE(libc);
  EXPECT_TRUE(crypto);
  // Deduplicated: each path once.
  for (std::size_t i = 1; i < libs.size(); ++i) EXPECT_LT(libs[i - 1].path, libs[i].path);
}

TEST(Facts, VersionsHostAndCpuDevice) {
  auto v = runtime_versions();
  EXPECT_FALSE(v["libtorch"].get<std::string>().empty());
  EXPECT_EQ(v["libtorch"].get<std::string>().find('.') != std::string::npos, true);
  EXPECT_FALSE(glibc_version().empty());
  auto os = os_info();
  EXPECT_EQ(os["sysname"], "Linux");
  EXPECT_FALSE(os["pretty_name"].get<std::string>().empty());
  auto h = host_info();
  EXPECT_GT(h["cpu_count"].get<unsigned>(), 0u);
  EXPECT_GT(h["memory_total_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_NE(h["cpu_model"], "");
  EnvGuard g("CUDA_VISIBLE_DEVICES");
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  auto d = device_info("cpu");
  EXPECT_EQ(d["visible_devices"]["CUDA_VISIBLE_DEVICES"], "0,1");
#ifndef ANCHOR_WITH_CUDA
  EXPECT_EQ(d["accelerator"], "cpu");
  EXPECT_TRUE(d["devices"].empty());
  EXPECT_EQ(v["cuda_runtime"], "none");
#endif
}

}  // namespace
}  // namespace anchor::manifest
