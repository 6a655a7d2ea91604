#pragma once
// The vector extensions the host optimizers (cpu_adam, cpu_lamb) run on, chosen
// at run time (no torch here).
namespace stratum::optim {

enum class CpuAdamIsa { scalar, avx2, avx512 };  // avx2 also needs FMA and F16C
enum class Copy16 { bf16, fp16 };
const char* isa_name(CpuAdamIsa isa);

// The path cpu_adam_step and the cpu_lamb passes take: STRATUM_CPU_ADAM_ISA
// (scalar|avx2|avx512) when set, else the widest the CPU supports. Throws
// stratum::Error for an unknown value or one this CPU cannot run.
CpuAdamIsa cpu_adam_isa();

}  // namespace stratum::optim
