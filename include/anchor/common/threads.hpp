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
};

// Sets the BLAS pool to `n` threads (n >= 1) where the library has a call for
// it, and returns what is in effect.
Blas bind_blas(int n);

// What is in effect, without changing it.
Blas blas();

}  // namespace anchor::threads
