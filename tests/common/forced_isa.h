#pragma once
// The CPU optimizers' vector paths a test can run here, and forcing one of
// them for a scope (STRATUM_CPU_ADAM_ISA, which cpu_adam and cpu_lamb read).
#include <cstdlib>
#include <vector>

namespace stratum::test {

// Sets STRATUM_CPU_ADAM_ISA for the scope, restoring "unset" after.
struct ForcedIsa {
  explicit ForcedIsa(const char* isa) { setenv("STRATUM_CPU_ADAM_ISA", isa, 1); }
  ~ForcedIsa() { unsetenv("STRATUM_CPU_ADAM_ISA"); }
};

// "scalar", and "avx2" (with FMA and F16C) and "avx512" where this CPU has them.
inline std::vector<const char*> runnable_isas() {
  std::vector<const char*> isas = {"scalar"};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    isas.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) isas.push_back("avx512");
#endif
  return isas;
}

}  // namespace stratum::test
