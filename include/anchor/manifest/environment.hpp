#pragma once
// Facts about the process and the machine that decide a run's result:
// dependency versions, loaded shared libraries, container, host and devices.
// Pure readers of /proc, /etc and the environment; none of them writes.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::manifest {

// A shared library mapped into this process.
struct LoadedLibrary {
  std::string path;                  // as /proc/self/maps names it (canonical)
  bool deleted = false;              // "(deleted)": replaced or removed on disk since it was loaded
  bool replaced_since_load = false;  // the path now names a different inode than the mapped one
};

// Every shared object mapped into this process (/proc/self/maps), deduplicated,
// sorted by path; the main executable is excluded (see docs/manifest.md).
// Throws Error (kIo) when /proc/self/maps cannot be read.
std::vector<LoadedLibrary> loaded_shared_libraries();
// The same for another process (/proc/<pid>/maps; its executable excluded).
std::vector<LoadedLibrary> loaded_shared_libraries(int pid);

// The directories the dynamic loader searches for this process's objects
// (dlinfo RTLD_DI_SERINFO of the program and of every loaded object:
// LD_LIBRARY_PATH, RPATH/RUNPATH with $ORIGIN expanded, the system
// directories), deduplicated, in no particular order. A new library in one of
// them can change what a fresh process loads.
std::vector<std::string> loader_search_dirs();

// gnu_get_libc_version(), e.g. "2.36".
std::string glibc_version();

// {"sysname","release","version","machine","pretty_name"} from uname(2) and
// /etc/os-release (PRETTY_NAME; "unknown" when absent).
nlohmann::json os_info();

// {"libtorch","cuda_runtime","cuda_driver","cudnn","nccl","hip_runtime", "miopen"}:
// each the version the process can see, or "none". GPU runtime versions are
// read through symbols already loaded in the process (dlsym), so a CPU build
// always reports "none".
nlohmann::json runtime_versions();

// Validates a container image digest: "sha256:" + 64 lowercase hex. Returns it;
// throws Error (kConfig) naming `source` (e.g. "container.digest") otherwise.
std::string validate_container_digest(const std::string& value, const std::string& source);

// Whether the process looks containerised; `evidence` gets the reasons
// ("/.dockerenv", "/run/.containerenv", "/proc/1/cgroup mentions docker", ...).
bool looks_containerised(std::vector<std::string>* evidence);

// The image a container runtime says this process runs, where it says so:
// Podman (and CRI-O's conmon) write /run/.containerenv into every container,
// whose `imageid="<64 hex>"` is the image's id, the SHA-256 of its config
// (content-addressed: another image cannot have it; it is not the registry's
// manifest digest, which Podman does not expose). {digest "sha256:<hex>",
// source, image (the name it was run as, when given)}; an empty digest when
// the file is absent or names no valid id. Docker, containerd and Kubernetes
// expose no digest inside the container: ANCHOR_CONTAINER_DIGEST there.
struct DetectedImage {
  std::string digest;
  std::string source;
  std::string image;
};
DetectedImage detect_container_image(const std::string& containerenv = "/run/.containerenv");

// {"digest": "sha256:..." | null, "source": "config" | "env" | "podman" | "none",
//  "required": bool, "containerised": bool, "evidence": [...], "detected": {...} | null}.
// The digest comes from `config_digest` (container.digest), else from
// $ANCHOR_CONTAINER_DIGEST, else from what the runtime exposes
// (detect_container_image on `containerenv`; recorded as "detected" in every
// case, not compared with the others: an image id and a registry digest of
// the same image differ). Throws Error (kConfig) when a digest is malformed,
// when config and environment disagree, or when `required` and no digest is known.
nlohmann::json container_info(const std::string& config_digest, bool required,
                              const std::string& containerenv = "/run/.containerenv");

// {"hostname","cpu_model","cpu_count","memory_total_bytes"}.
nlohmann::json host_info();

// {"configured": configured_device, "accelerator": "cpu"|"cuda", "devices": [...],
//  "visible_devices": {"CUDA_VISIBLE_DEVICES": value|null, "HIP_VISIBLE_DEVICES": ...}}.
// Devices (name, total memory) are listed only in builds with CUDA
// (ANCHOR_WITH_CUDA) that find any through the driver API; otherwise
// "devices": [] and "accelerator": "cpu".
nlohmann::json device_info(const std::string& configured_device);

}  // namespace anchor::manifest
