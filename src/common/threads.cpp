#include "anchor/common/threads.hpp"

#include "anchor/common/utf8.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace anchor::threads {
namespace {

template <typename F>
F symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
}

// mkl_cbwr_get(MKL_CBWR_BRANCH) in words (mkl_service.h's MKL_CBWR_* values:
// 0 and 1 off, 2 AUTO, 3 COMPATIBLE, 4 and up an instruction set's branch, all
// reproducible; 0x10000 the STRICT flag). PyTorch's wheel exports the service
// layer's name of it, not the public one.
std::string mkl_cnr_branch() {
  auto get = symbol<int (*)(int)>("mkl_cbwr_get");
  if (!get) get = symbol<int (*)(int)>("mkl_serv_cbwr_get");
  if (!get) return "unknown";
  constexpr int kBranch = 1, kStrict = 0x10000;
  const int word = get(kBranch);
  if (word < 0) return "unknown";
  const int branch = word & 0xFFFF;
  std::string name = branch <= 1   ? "off"
                     : branch == 2 ? "auto"
                     : branch == 3 ? "compatible"
                                   : "branch " + std::to_string(branch);
  return (word & kStrict) && branch > 1 ? name + ",strict" : name;
}

}  // namespace

void request_reproducible_blas() { ::setenv("MKL_CBWR", "AUTO", /*overwrite=*/0); }

Blas blas() {
  if (auto get = symbol<int (*)()>("openblas_get_num_threads")) return {"openblas", get(), ""};
  if (auto get = symbol<int (*)()>("MKL_Get_Max_Threads")) return {"mkl", get(), mkl_cnr_branch()};
  return {};
}

std::map<std::string, std::string> pool_wait_env() {
  std::map<std::string, std::string> env;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) env["GOMP_SPINCOUNT"] = "10000";
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) env["OPENBLAS_THREAD_TIMEOUT"] = "4";  // 2^4 cycles: sleep at once
  return env;
}

nlohmann::json pool_wait_json() {
  nlohmann::json j = nlohmann::json::object();
  for (const char* name : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"}) {
    const char* v = std::getenv(name);
    j[name] = v ? nlohmann::json(printable(v)) : nlohmann::json();
  }
  return j;
}

Blas bind_blas(int n) {
  if (n >= 1) {
    if (auto set = symbol<void (*)(int)>("openblas_set_num_threads"))
      set(n);
    else if (auto mkl = symbol<void (*)(int)>("MKL_Set_Num_Threads"))
      mkl(n);
  }
  return blas();
}

}  // namespace anchor::threads
