#pragma once
// The thread pools a worker runs besides LibTorch's own: the BLAS library's.
// OpenBLAS built with pthreads (Debian's libopenblas0-pthread, which Debian's
// LibTorch links) keeps a pool that at::set_num_threads does not reach, sized
// from the machine's cores; MKL follows OpenMP. Found at run time with dlsym,
// so nothing links against a particular BLAS.
#include <string>

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

}  // namespace anchor::threads
