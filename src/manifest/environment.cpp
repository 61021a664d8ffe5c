#include "anchor/manifest/environment.hpp"

#include <dlfcn.h>
#include <link.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "anchor/build_info.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::manifest {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool is_shared_object(const std::string& path) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto pos = base.find(".so");
  return pos != std::string::npos && (pos + 3 == base.size() || base[pos + 3] == '.');  // libx.so or libx.so.1.2
}

std::string exe_path_of(const std::string& proc_dir) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink((proc_dir + "/exe").c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

// "12.4" from CUDA's 12040-style integers.
std::string cuda_style_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

template <typename Fn>
Fn loaded_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

std::vector<LoadedLibrary> loaded_shared_libraries() { return loaded_shared_libraries(0); }

std::vector<LoadedLibrary> loaded_shared_libraries(int pid) {
  const std::string dir = pid > 0 ? "/proc/" + std::to_string(pid) : std::string("/proc/self");
  std::ifstream in(dir + "/maps");
  if (!in) throw io_error("open", dir + "/maps", errno);
  const std::string exe = exe_path_of(dir);
  std::map<std::string, LoadedLibrary> libs;
  std::map<std::string, std::uint64_t> mapped_inode;
  std::string line;
  while (std::getline(in, line)) {
    // address perms offset dev inode pathname
    std::istringstream ls(line);
    std::string addr, perms, offset, dev;
    std::uint64_t inode = 0;
    if (!(ls >> addr >> perms >> offset >> dev >> inode)) continue;
    std::string path;
    std::getline(ls, path);
    path = trim(path);
    if (path.empty() || path[0] != '/') continue;
    bool deleted = false;
    const std::string kDeleted = " (deleted)";
    if (path.size() > kDeleted.size() && path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
      deleted = true;
      path.resize(path.size() - kDeleted.size());
    }
    if (path == exe || !is_shared_object(path)) continue;
    auto& lib = libs[path];
    lib.path = path;
    lib.deleted = lib.deleted || deleted;
    mapped_inode[path] = inode;
  }
  std::vector<LoadedLibrary> out;
  for (auto& [path, lib] : libs) {
    struct stat st {};
    if (!lib.deleted && ::stat(path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_ino) != mapped_inode[path])
      lib.replaced_since_load = true;
    out.push_back(lib);
  }
  return out;
}

namespace {

// The search path dlinfo reports for one handle, added to `out`.
void add_search_dirs(void* handle, std::set<std::string>& out) {
  Dl_serinfo size{};
  if (::dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size < sizeof(Dl_serinfo)) return;
  std::vector<std::max_align_t> buf(size.dls_size / sizeof(std::max_align_t) + 1);
  auto* info = reinterpret_cast<Dl_serinfo*>(buf.data());
  *info = size;  // dls_size and dls_cnt from the first call, as dlinfo(3) asks
  if (::dlinfo(handle, RTLD_DI_SERINFO, info) != 0) return;
  for (unsigned i = 0; i < info->dls_cnt; ++i)
    if (info->dls_serpath[i].dls_name) out.insert(info->dls_serpath[i].dls_name);
}

int collect_object(struct dl_phdr_info* info, std::size_t, void* data) {
  auto* names = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name && info->dlpi_name[0]) names->push_back(info->dlpi_name);
  return 0;
}

}  // namespace

std::vector<std::string> loader_search_dirs() {
  std::set<std::string> dirs;
  if (void* self = ::dlopen(nullptr, RTLD_LAZY)) {
    add_search_dirs(self, dirs);
    ::dlclose(self);
  }
  std::vector<std::string> objects;
  ::dl_iterate_phdr(collect_object, &objects);
  for (const auto& name : objects)
    if (void* h = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {  // already loaded: no new mapping
      add_search_dirs(h, dirs);
      ::dlclose(h);
    }
  return {dirs.begin(), dirs.end()};
}

std::string glibc_version() { return gnu_get_libc_version(); }

nlohmann::json os_info() {
  nlohmann::json j;
  struct utsname u {};
  if (::uname(&u) == 0) {
    j["sysname"] = u.sysname;
    j["release"] = u.release;
    j["version"] = u.version;
    j["machine"] = u.machine;
  }
  std::string pretty = "unknown";
  for (const char* f : {"/etc/os-release", "/usr/lib/os-release"}) {
    std::ifstream in(f);
    if (!in) continue;
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
      std::string v = trim(line.substr(12));
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
        v = v.substr(1, v.size() - 2);
      pretty = v;
    }
    break;
  }
  j["pretty_name"] = pretty;
  return j;
}

nlohmann::json runtime_versions() {
  nlohmann::json j;
  j["libtorch"] = build::kLibTorchVersion;  // TorchConfig's version, the same as its headers' TORCH_VERSION
  // GPU runtimes: ask the libraries this process has loaded, if any. A CPU
  // LibTorch loads none of them, so these read "none" there.
  using IntGetter = int (*)(int*);
  std::string cuda_rt = "none", cuda_drv = "none", cudnn = "none", nccl = "none", hip = "none", miopen = "none";
  int v = 0;
  if (auto f = loaded_symbol<IntGetter>("cudaRuntimeGetVersion"); f && f(&v) == 0 && v > 0)
    cuda_rt = cuda_style_version(v);
  if (auto f = loaded_symbol<IntGetter>("cudaDriverGetVersion"); f && f(&v) == 0 && v > 0)
    cuda_drv = cuda_style_version(v);
  if (auto f = loaded_symbol<std::size_t (*)()>("cudnnGetVersion"); f) {
    std::size_t c = f();
    if (c >= 10000)  // cuDNN >= 9: major*10000 + minor*100 + patch
      cudnn = std::to_string(c / 10000) + "." + std::to_string((c % 10000) / 100) + "." + std::to_string(c % 100);
    else if (c > 0)  // cuDNN 8: major*1000 + minor*100 + patch
      cudnn = std::to_string(c / 1000) + "." + std::to_string((c % 1000) / 100) + "." + std::to_string(c % 100);
  }
  if (auto f = loaded_symbol<IntGetter>("ncclGetVersion"); f && f(&v) == 0 && v > 0) {
    // NCCL >= 2.9: major*10000 + minor*100 + patch; older: major*1000 + minor*100 + patch.
    nccl = v >= 10000
               ? std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100)
               : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
  }
  if (auto f = loaded_symbol<IntGetter>("hipRuntimeGetVersion"); f && f(&v) == 0 && v > 0)
    hip = std::to_string(v);  // HIP_VERSION encoding: major*10^7 + minor*10^5 + patch
  using MiopenGetter = int (*)(std::size_t*, std::size_t*, std::size_t*);
  std::size_t a = 0, b = 0, c = 0;
  if (auto f = loaded_symbol<MiopenGetter>("miopenGetVersion"); f && f(&a, &b, &c) == 0)
    miopen = std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
  j["cuda_runtime"] = cuda_rt;
  j["cuda_driver"] = cuda_drv;
  j["cudnn"] = cudnn;
  j["nccl"] = nccl;
  j["hip_runtime"] = hip;
  j["miopen"] = miopen;
  return j;
}

std::string validate_container_digest(const std::string& value, const std::string& source) {
  const std::string kPrefix = "sha256:";
  bool ok = value.rfind(kPrefix, 0) == 0;
  if (ok) {
    std::string hex = value.substr(kPrefix.size());
    ok = hex.size() == 64;
    for (char ch : hex) ok = ok && ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'));
  }
  if (!ok)
    throw Error(ErrorKind::kConfig,
                source + ": '" + value +
                    "' is not a container image digest: expected 'sha256:' "
                    "followed by 64 lowercase hex characters",
                "take it from `docker inspect --format '{{index .RepoDigests 0}}' IMAGE` (the part "
                "after '@'), or `skopeo inspect docker://IMAGE | jq -r .Digest`");
  return value;
}

bool looks_containerised(std::vector<std::string>* evidence) {
  std::vector<std::string> why;
  struct stat st {};
  if (::stat("/.dockerenv", &st) == 0) why.push_back("/.dockerenv exists");
  if (::stat("/run/.containerenv", &st) == 0) why.push_back("/run/.containerenv exists");
  {
    std::ifstream in("/proc/1/cgroup");
    std::string line;
    while (in && std::getline(in, line)) {
      for (const char* word : {"docker", "kubepods", "containerd", "libpod", "lxc"}) {
        if (line.find(word) != std::string::npos) {
          why.push_back(std::string("/proc/1/cgroup mentions ") + word);
          goto cgroup_done;
        }
      }
    }
  cgroup_done:;
  }
  {
    // An overlay root file system is how image layers are usually mounted.
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (in && std::getline(in, line)) {
      std::istringstream ls(line);
      std::string id, parent, devno, root, mount;
      if (!(ls >> id >> parent >> devno >> root >> mount) || mount != "/") continue;
      auto dash = line.find(" - ");
      if (dash != std::string::npos && line.compare(dash + 3, 8, "overlay ") == 0)
        why.push_back("the root file system is an overlay mount");
      break;
    }
  }
  bool yes = !why.empty();
  if (evidence) *evidence = std::move(why);
  return yes;
}

DetectedImage detect_container_image(const std::string& containerenv) {
  // key="value" lines, a few hundred bytes in all; read through open_regular (a
  // FIFO or device there is not read) and at most 64 KiB of it.
  std::string text;
  try {
    fs::UniqueFd fd = fs::open_regular(containerenv);
    char buf[4096];
    constexpr std::size_t kMost = 64u << 10;
    while (text.size() < kMost) {
      const ssize_t got = ::read(fd.get(), buf, std::min(sizeof buf, kMost - text.size()));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      text.append(buf, static_cast<std::size_t>(got));
    }
  } catch (const Error&) {
    return {};  // absent (not Podman) or not a file: nothing detected
  }
  std::string id, engine, image;
  std::size_t at = 0;
  for (int n = 0; at < text.size() && n < 64; ++n) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos || line.size() > 4096) continue;
    const std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (key == "engine") engine = value;
    if (key == "imageid") id = value;
    if (key == "image" && is_valid_utf8(value)) image = value;
  }
  // Only Podman's own file: Buildah writes the same file with engine="buildah-..."
  // and the id of the image it builds FROM, which is not the image this runs in.
  if (engine.rfind("podman-", 0) != 0) return {};
  if (id.rfind("sha256:", 0) == 0) id = id.substr(7);
  if (!is_sha256_hex(id)) return {};
  DetectedImage d;
  d.digest = "sha256:" + id;
  d.source = "podman";
  d.image = image;
  return d;
}

nlohmann::json container_info(const std::string& config_digest, bool required, const std::string& containerenv) {
  const char* env = std::getenv("ANCHOR_CONTAINER_DIGEST");
  std::string env_digest = env ? env : "";
  std::string digest, source = "none";
  if (!config_digest.empty()) {
    digest = validate_container_digest(config_digest, "container.digest");
    source = "config";
    if (!env_digest.empty()) {
      validate_container_digest(env_digest, "ANCHOR_CONTAINER_DIGEST");
      if (env_digest != config_digest)
        throw Error(
            ErrorKind::kConfig,
            "container digest: container.digest is " + config_digest + " but ANCHOR_CONTAINER_DIGEST is " + env_digest,
            "the two must name the same image; unset one of them");
    }
  } else if (!env_digest.empty()) {
    digest = validate_container_digest(env_digest, "ANCHOR_CONTAINER_DIGEST");
    source = "env";
  }
  const DetectedImage detected = detect_container_image(containerenv);
  if (digest.empty() && !detected.digest.empty()) {
    digest = detected.digest;
    source = detected.source;
  }
  std::vector<std::string> evidence;
  bool containerised = looks_containerised(&evidence);
  if (required && digest.empty())
    throw Error(ErrorKind::kConfig,
                "container.required is true but no container image digest is known (none configured, "
                "ANCHOR_CONTAINER_DIGEST unset, and the runtime exposes none: only Podman does, for a container run "
                "with --privileged, in " +
                    containerenv + ")",
                std::string("set container.digest in the config (or --set container.digest=sha256:...) "
                            "or run the image with -e ANCHOR_CONTAINER_DIGEST=$(docker inspect --format "
                            "'{{index .RepoDigests 0}}' IMAGE | cut -d@ -f2) (docs/manifest.md, \"Container\")") +
                    (containerised ? "" : "; this process does not even look containerised"));
  nlohmann::json j;
  j["digest"] = digest.empty() ? nlohmann::json(nullptr) : nlohmann::json(digest);
  j["source"] = source;
  j["required"] = required;
  j["containerised"] = containerised;
  j["evidence"] = evidence;
  j["detected"] =
      detected.digest.empty()
          ? nlohmann::json(nullptr)
          : nlohmann::json{{"digest", detected.digest}, {"source", detected.source}, {"image", detected.image}};
  return j;
}

nlohmann::json host_info() {
  nlohmann::json j;
  j["hostname"] = proc::host_name();
  std::string model = "unknown";
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (in && std::getline(in, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = trim(line.substr(0, colon));
      if (key == "model name" || key == "Model" || key == "cpu model") {
        model = trim(line.substr(colon + 1));
        break;
      }
    }
  }
  j["cpu_model"] = model;
  unsigned n = std::thread::hardware_concurrency();
  j["cpu_count"] = n;
  std::uint64_t mem = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemTotal:") {
        mem = kb * 1024;
        break;
      }
    }
  }
  j["memory_total_bytes"] = mem;
  return j;
}

nlohmann::json device_info(const std::string& configured_device) {
  nlohmann::json j;
  j["configured"] = configured_device;
  nlohmann::json devices = nlohmann::json::array();
  std::string accelerator = "cpu";
#ifdef ANCHOR_WITH_CUDA
  // The driver API (libcuda) has a stable C ABI and honours
  // CUDA_VISIBLE_DEVICES, unlike NVML; it is opened only in CUDA builds.
  if (void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using Init = int (*)(unsigned);
    using Count = int (*)(int*);
    using Get = int (*)(int*, int);
    using Name = int (*)(char*, int, int);
    using Mem = int (*)(std::size_t*, int);
    auto init = reinterpret_cast<Init>(::dlsym(h, "cuInit"));
    auto count = reinterpret_cast<Count>(::dlsym(h, "cuDeviceGetCount"));
    auto get = reinterpret_cast<Get>(::dlsym(h, "cuDeviceGet"));
    auto name = reinterpret_cast<Name>(::dlsym(h, "cuDeviceGetName"));
    auto mem = reinterpret_cast<Mem>(::dlsym(h, "cuDeviceTotalMem_v2"));
    int n = 0;
    if (init && count && get && name && mem && init(0) == 0 && count(&n) == 0) {
      for (int i = 0; i < n; ++i) {
        int dev = 0;
        char buf[256] = {0};
        std::size_t bytes = 0;
        if (get(&dev, i) != 0 || name(buf, sizeof buf - 1, dev) != 0 || mem(&bytes, dev) != 0) continue;
        devices.push_back({{"index", i}, {"name", std::string(buf)}, {"memory_total_bytes", bytes}});
      }
    }
    // Left loaded on purpose: unloading the driver library is not supported.
  }
  if (!devices.empty()) accelerator = "cuda";
#endif
  j["accelerator"] = accelerator;
  j["count"] = devices.size();
  j["devices"] = std::move(devices);
  nlohmann::json vis;
  for (const char* var : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    const char* v = std::getenv(var);
    vis[var] = v ? nlohmann::json(std::string(v)) : nlohmann::json(nullptr);
  }
  j["visible_devices"] = std::move(vis);
  return j;
}

}  // namespace anchor::manifest
