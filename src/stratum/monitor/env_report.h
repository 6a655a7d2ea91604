#pragma once
// The environment report (`stratum-report`, like DeepSpeed's `ds_report`):
// what was built, what is loaded at run time, and what the machine offers.
// Collecting never throws: a fact that cannot be read is reported as such, so
// the report stays useful on exactly the machines where something is wrong.
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace stratum::monitor {

// Facts fixed when Stratum was configured and compiled.
struct BuildInfo {
  std::string stratum_version;
  std::string git_sha;
  std::string build_type;
  std::string compiler;
  long cxx_standard = 0;             // __cplusplus
  std::string torch_wheel_version;   // torch.__version__ seen by CMake, e.g. "2.13.0+cpu"
};

struct TorchInfo {
  std::string runtime_version;  // from the loaded libtorch (at::show_config), "" if unreadable
  std::string header_version;   // TORCH_VERSION of the headers compiled against
  bool built_with_cuda = false; // the loaded libtorch's USE_CUDA
  std::string cuda_version;     // the CUDA that libtorch was built for, "" on CPU builds
  bool cuda_available = false;  // at::hasCUDA(): a CUDA build that also sees a GPU
  std::string cpu_capability;   // the vector ISA ATen dispatches CPU kernels to, e.g. "AVX512"
};

struct GpuInfo {
  int index = 0;
  std::string name;
  unsigned long long memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

struct CudaInfo {
  bool compiled = false;       // Stratum built with STRATUM_WITH_CUDA
  std::string runtime_version; // cudaRuntimeGetVersion, e.g. "13.0"
  std::string driver_version;  // the highest CUDA version the driver supports
  std::vector<GpuInfo> gpus;
  std::string error;           // why GPUs could not be listed, "" if they could
};

struct CommInfo {
  std::string nccl_version;          // e.g. "2.27.3"; "" when not built with NCCL
  std::string mpi_library_version;   // first line of MPI_Get_library_version
  std::string mpi_standard_version;  // MPI_Get_version, e.g. "3.1"
  std::optional<std::string> nccl_nvls_enable;  // NCCL_NVLS_ENABLE, if set
};

struct CpuFeature {
  std::string name;  // as in /proc/cpuinfo flags, e.g. "avx512f"
  bool supported = false;
};

struct CpuInfo {
  std::string model_name;
  int logical_cores = 0;  // online in the machine
  int usable_cores = 0;   // in this process's affinity mask (containers, taskset)
  std::vector<CpuFeature> features;
  int aten_intra_op_threads = 0;
  int aten_inter_op_threads = 0;
  std::optional<std::string> omp_num_threads;  // OMP_NUM_THREADS, if set
};

struct EnvReport {
  BuildInfo build;
  TorchInfo torch;
  CudaInfo cuda;
  CommInfo comm;
  CpuInfo cpu;
};

EnvReport collect_env_report();

// Human-readable, grouped "name ........ value" lines, ending in a newline.
std::string format_env_report(const EnvReport& report);

// `nlohmann::json j = report;` (found by ADL).
void to_json(nlohmann::json& j, const EnvReport& report);

}  // namespace stratum::monitor
