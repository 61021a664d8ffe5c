#include "anchor/common/threads.hpp"

#include <dlfcn.h>

namespace anchor::threads {
namespace {

template <typename F>
F symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

Blas blas() {
  if (auto get = symbol<int (*)()>("openblas_get_num_threads")) return {"openblas", get()};
  if (auto get = symbol<int (*)()>("MKL_Get_Max_Threads")) return {"mkl", get()};
  return {};
}

Blas bind_blas(int n) {
  if (n >= 1) {
    if (auto set = symbol<void (*)(int)>("openblas_set_num_threads")) set(n);
    else if (auto mkl = symbol<void (*)(int)>("MKL_Set_Num_Threads")) mkl(n);
  }
  return blas();
}

}  // namespace anchor::threads
