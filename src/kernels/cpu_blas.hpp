// Internal: the CBLAS header plus run-time queries of the BLAS in use.
// OpenBLAS's own functions are declared weak: linked against another CBLAS
// (reference BLAS, BLIS) they resolve to null and the queries say "unknown"
// instead of failing to link.
#pragma once
#include <cblas.h>

#include <string>

extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

namespace geotrain::kernels::cpu {

// OpenBLAS's kernel family in force ("Haswell" = AVX2, "SkylakeX" or
// "Cooperlake" = AVX-512); it follows OPENBLAS_CORETYPE when that is set.
// Empty when the BLAS is not OpenBLAS.
inline std::string blas_core_name() {
  if (openblas_get_corename == nullptr) return {};
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string();
}

// Threads OpenBLAS uses for one GEMM; 0 when unknown.
inline int blas_thread_count() {
  return openblas_get_num_threads != nullptr ? openblas_get_num_threads() : 0;
}

}  // namespace geotrain::kernels::cpu
