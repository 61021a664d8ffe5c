#pragma once
// The thread pools a worker runs besides LibTorch's own: the BLAS library's.
// OpenBLAS built with pthreads (Debian's libopenblas0-pthread, which Debian's
// LibTorch links) keeps a pool that at::set_num_threads does not reach, sized
// from the machine's cores; MKL follows OpenMP. Found at run time with dlsym,
// so nothing links against a particular BLAS. Also how long the idle threads
// of both pools (OpenMP's and OpenBLAS's) wait before they sleep, which a
// worker is told through its environment (pool_wait_env).
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace anchor::threads {

struct Blas {
  std::string library;  // "openblas", "mkl", or "" when neither is loaded
  int threads = -1;     // its pool's size after the call; -1 when unknown
  // MKL's conditional numerical reproducibility (CNR) branch: "auto",
  // "compatible", "branch N" (an instruction set's), any of them ",strict";
  // "off"; "unknown" when MKL does not say; "" for another library.
  std::string reproducible;
};

// Asks MKL for conditional numerical reproducibility (MKL_CBWR=AUTO) unless
// MKL_CBWR is set already. Without it MKL may schedule a call's work across its
// threads dynamically, so with more than one thread the order of a sum, and so
// its last bits, can change from run to run under load: a resumed run would
// not match bitwise. AUTO fixes the order for a given CPU and thread count.
// MKL reads MKL_CBWR once, at its first call: call this before any LibTorch
// work (what blas() then reports says whether it was in time).
void request_reproducible_blas();

// Sets the BLAS pool to `n` threads (n >= 1) where the library has a call for
// it, and returns what is in effect.
Blas bind_blas(int n);

// What is in effect, without changing it.
Blas blas();

// How long the two pools' idle threads spin before they sleep: the variables
// a built-in worker is started with (the supervisor adds them to its
// environment; both libraries read them once, when they load). LibTorch's
// intra-op pool is OpenMP's (libgomp), whose threads spin 300,000 times after
// each parallel region by default; where OpenBLAS keeps a pool of its own
// (pthreads, Debian's LibTorch), its threads yield in a loop for 2^28 cycles
// after each call. With run.threads as many as the cores, the spinning threads
// of one pool hold the cores the other pool's threads need: on the 2-core VM
// the 25.5M pilot took 19.5-21.1 s with the defaults and 12.1-12.7 s with
// GOMP_SPINCOUNT=10000 and OPENBLAS_THREAD_TIMEOUT=4 (docs/benchmarks.md,
// "Idle thread pools"). Only variables the environment does not set are
// returned: a user's choice stands, and either OpenMP variable
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) leaves OpenMP's as it is.
std::map<std::string, std::string> pool_wait_env();

// The three variables as this process sees them, each its value or null (the
// manifest's threads.wait_env).
nlohmann::json pool_wait_json();

}  // namespace anchor::threads
