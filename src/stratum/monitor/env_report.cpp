#include "stratum/monitor/env_report.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>  // at::show_config, at::get_cpu_capability (and at::hasCUDA via Context.h)
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#include <nlohmann/json.hpp>

// Only MPI's C API: the C++ bindings of some MPIs need an extra library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#ifdef STRATUM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef STRATUM_WITH_NCCL
#include <nccl.h>
#endif

#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "stratum/build_info.h"

namespace stratum::monitor {
namespace {

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// ---- torch ------------------------------------------------------------------

// One value of the "Build settings: KEY=value, KEY=value, ..." line that
// at::show_config() prints; "" if absent. Read from the loaded library, so it
// tells what runs, not what the headers promised.
std::string build_setting(const std::string& config, const std::string& key) {
  const std::string needle = " " + key + "=";
  const auto pos = config.find(needle);
  if (pos == std::string::npos) return "";
  const auto begin = pos + needle.size();
  const auto end = config.find_first_of(",\n", begin);
  return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

bool is_on(const std::string& flag) { return flag == "1" || flag == "ON" || flag == "TRUE"; }

std::string torch_header_version() {
#if defined(TORCH_VERSION)
  return TORCH_VERSION;
#elif defined(TORCH_VERSION_MAJOR)
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
#else
  return STRATUM_TORCH_BUILD_VERSION;
#endif
}

TorchInfo collect_torch() {
  TorchInfo info;
  info.header_version = torch_header_version();
  try {
    const std::string config = at::show_config();
    info.runtime_version = build_setting(config, "TORCH_VERSION");
    info.built_with_cuda = is_on(build_setting(config, "USE_CUDA"));
    info.cuda_version = build_setting(config, "CUDA_VERSION");
    info.cpu_capability = at::get_cpu_capability();
    info.cuda_available = at::hasCUDA();
  } catch (const std::exception&) {
    // A broken CUDA setup can throw from here; the report shows what is missing.
  }
  return info;
}

// ---- CUDA -------------------------------------------------------------------

#ifdef STRATUM_WITH_CUDA
std::string cuda_version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

CudaInfo collect_cuda() {
  CudaInfo info;
  info.compiled = true;
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) info.runtime_version = cuda_version_string(version);
  if (cudaDriverGetVersion(&version) == cudaSuccess)
    info.driver_version = version ? cuda_version_string(version) : "no driver";
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    info.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    (void)cudaGetLastError();  // do not leave a sticky error for later CUDA calls
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaError_t err = cudaGetDeviceProperties(&p, i); err != cudaSuccess) {
      info.error = "cudaGetDeviceProperties(" + std::to_string(i) + "): " + cudaGetErrorString(err);
      continue;
    }
    info.gpus.push_back({i, p.name, static_cast<unsigned long long>(p.totalGlobalMem), p.major, p.minor,
                         p.multiProcessorCount});
  }
  return info;
}
#else
CudaInfo collect_cuda() { return {}; }
#endif

// ---- communication ------------------------------------------------------------

std::string nccl_version() {
#ifdef STRATUM_WITH_NCCL
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "ncclGetVersion failed";
  // Since NCCL 2.9 the code is major*10000 + minor*100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
#else
  return "";
#endif
}

CommInfo collect_comm() {
  CommInfo info;
  info.nccl_version = nccl_version();
  // Both calls are allowed before MPI_Init, so the report needs no mpirun.
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;  // Open MPI counts the terminating NUL, so read it as a C string
  if (MPI_Get_library_version(library, &length) == MPI_SUCCESS) info.mpi_library_version = first_line(library);
  int major = 0, minor = 0;
  if (MPI_Get_version(&major, &minor) == MPI_SUCCESS)
    info.mpi_standard_version = std::to_string(major) + "." + std::to_string(minor);
  info.nccl_nvls_enable = env_value("NCCL_NVLS_ENABLE");
  return info;
}

// ---- CPU ----------------------------------------------------------------------

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "" : line.substr(begin);
  }
  return "unknown";
}

std::vector<CpuFeature> cpu_features() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports needs literal names, hence the spelled-out list.
  return {{"sse4_2", __builtin_cpu_supports("sse4.2") != 0},
          {"avx", __builtin_cpu_supports("avx") != 0},
          {"avx2", __builtin_cpu_supports("avx2") != 0},
          {"fma", __builtin_cpu_supports("fma") != 0},
          {"avx512f", __builtin_cpu_supports("avx512f") != 0},
          {"avx512_bf16", __builtin_cpu_supports("avx512bf16") != 0}};
#else
  return {};
#endif
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

CpuInfo collect_cpu() {
  CpuInfo info;
  info.model_name = cpu_model_name();
  info.logical_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  info.usable_cores = usable_cores();
  info.features = cpu_features();
  info.aten_intra_op_threads = at::get_num_threads();
  info.aten_inter_op_threads = at::get_num_interop_threads();
  info.omp_num_threads = env_value("OMP_NUM_THREADS");
  return info;
}

BuildInfo collect_build() {
  return {STRATUM_VERSION, STRATUM_GIT_SHA, STRATUM_BUILD_TYPE, STRATUM_CXX_COMPILER, __cplusplus,
          STRATUM_TORCH_BUILD_VERSION};
}

// ---- text ---------------------------------------------------------------------

struct Line {
  std::string label;
  std::string value;
};
struct Section {
  std::string title;
  std::vector<Line> lines;
};

std::string yes_no(bool b) { return b ? "yes" : "no"; }
std::string or_unknown(const std::string& s) { return s.empty() ? "unknown" : s; }
std::string or_unset(const std::optional<std::string>& s) { return s ? *s : "(not set)"; }

std::string gib(unsigned long long bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1ULL << 30) << " GiB";
  return out.str();
}

Section torch_section(const TorchInfo& t) {
  std::string runtime = or_unknown(t.runtime_version);
  // Headers and library from different wheels is a classic source of odd crashes.
  if (!t.runtime_version.empty() && t.runtime_version != t.header_version)
    runtime += "  [differs from the headers: " + t.header_version + "]";
  return {"torch",
          {{"torch version", runtime},
           {"torch headers version", t.header_version},
           {"torch built with CUDA", yes_no(t.built_with_cuda)},
           {"torch CUDA version", t.built_with_cuda ? or_unknown(t.cuda_version) : "none"},
           {"CUDA available to torch", yes_no(t.cuda_available)},
           {"ATen CPU capability", or_unknown(t.cpu_capability)}}};
}

Section cuda_section(const CudaInfo& c) {
  Section s{"CUDA / GPUs", {}};
  if (!c.compiled) {
    s.lines.push_back({"CUDA", "no CUDA in this torch build"});
    return s;
  }
  s.lines.push_back({"CUDA runtime version", or_unknown(c.runtime_version)});
  s.lines.push_back({"CUDA driver supports up to", or_unknown(c.driver_version)});
  s.lines.push_back({"GPUs", std::to_string(c.gpus.size())});
  for (const auto& g : c.gpus) {
    s.lines.push_back({"GPU " + std::to_string(g.index),
                       g.name + ", " + gib(g.memory_bytes) + ", compute " + std::to_string(g.compute_major) +
                           "." + std::to_string(g.compute_minor) + ", " + std::to_string(g.multiprocessors) +
                           " SMs"});
  }
  if (!c.error.empty()) s.lines.push_back({"GPU query error", c.error});
  return s;
}

Section cpu_section(const CpuInfo& c) {
  Section s{"CPU",
            {{"model", c.model_name},
             {"logical cores", std::to_string(c.logical_cores)},
             {"cores usable by this process", std::to_string(c.usable_cores)}}};
  for (const auto& f : c.features) s.lines.push_back({"CPU " + f.name, yes_no(f.supported)});
  s.lines.push_back({"ATen intra-op threads", std::to_string(c.aten_intra_op_threads)});
  s.lines.push_back({"ATen inter-op threads", std::to_string(c.aten_inter_op_threads)});
  s.lines.push_back({"OMP_NUM_THREADS", or_unset(c.omp_num_threads)});
  return s;
}

std::vector<Section> sections(const EnvReport& r) {
  return {
      {"Stratum",
       {{"Stratum version", r.build.stratum_version},
        {"git sha", r.build.git_sha},
        {"build type", r.build.build_type}}},
      {"Compiler / build",
       {{"C++ compiler", r.build.compiler},
        {"C++ standard", std::to_string(r.build.cxx_standard)},
        {"torch wheel at configure", r.build.torch_wheel_version}}},
      torch_section(r.torch),
      cuda_section(r.cuda),
      {"Communication",
       {{"NCCL version", r.comm.nccl_version.empty() ? "not built (CPU torch)" : r.comm.nccl_version},
        {"NCCL_NVLS_ENABLE", or_unset(r.comm.nccl_nvls_enable)},
        {"MPI library version", or_unknown(r.comm.mpi_library_version)},
        {"MPI standard version", or_unknown(r.comm.mpi_standard_version)}}},
      cpu_section(r.cpu),
  };
}

constexpr size_t kLabelWidth = 34;  // label plus its dots, as in ds_report
const std::string kRule(72, '-');

}  // namespace

EnvReport collect_env_report() {
  return {collect_build(), collect_torch(), collect_cuda(), collect_comm(), collect_cpu()};
}

std::string format_env_report(const EnvReport& report) {
  std::ostringstream out;
  out << kRule << "\nStratum environment report\n" << kRule << "\n";
  for (const auto& section : sections(report)) {
    out << section.title << ":\n";
    for (const auto& line : section.lines) {
      const size_t dots = line.label.size() + 2 < kLabelWidth ? kLabelWidth - line.label.size() - 1 : 3;
      out << "  " << line.label << ' ' << std::string(dots, '.') << ' ' << line.value << '\n';
    }
  }
  out << kRule << "\n";
  return out.str();
}

// ---- JSON: the same facts, typed, for scripts ----------------------------------

void to_json(nlohmann::json& j, const EnvReport& r) {
  auto optional = [](const std::optional<std::string>& s) { return s ? nlohmann::json(*s) : nlohmann::json(); };
  auto gpus = nlohmann::json::array();
  for (const auto& g : r.cuda.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_capability", std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor)},
                    {"multiprocessors", g.multiprocessors}});
  }
  auto features = nlohmann::json::object();
  for (const auto& f : r.cpu.features) features[f.name] = f.supported;
  j = {{"build",
        {{"stratum_version", r.build.stratum_version},
         {"git_sha", r.build.git_sha},
         {"build_type", r.build.build_type},
         {"compiler", r.build.compiler},
         {"cxx_standard", r.build.cxx_standard},
         {"torch_wheel_version", r.build.torch_wheel_version}}},
       {"torch",
        {{"runtime_version", r.torch.runtime_version},
         {"header_version", r.torch.header_version},
         {"built_with_cuda", r.torch.built_with_cuda},
         {"cuda_version", r.torch.cuda_version},
         {"cuda_available", r.torch.cuda_available},
         {"cpu_capability", r.torch.cpu_capability}}},
       {"cuda",
        {{"compiled", r.cuda.compiled},
         {"runtime_version", r.cuda.runtime_version},
         {"driver_version", r.cuda.driver_version},
         {"gpus", gpus},
         {"error", r.cuda.error}}},
       {"comm",
        {{"nccl_version", r.comm.nccl_version.empty() ? nlohmann::json() : nlohmann::json(r.comm.nccl_version)},
         {"nccl_nvls_enable", optional(r.comm.nccl_nvls_enable)},
         {"mpi_library_version", r.comm.mpi_library_version},
         {"mpi_standard_version", r.comm.mpi_standard_version}}},
       {"cpu",
        {{"model_name", r.cpu.model_name},
         {"logical_cores", r.cpu.logical_cores},
         {"usable_cores", r.cpu.usable_cores},
         {"features", features},
         {"aten_intra_op_threads", r.cpu.aten_intra_op_threads},
         {"aten_inter_op_threads", r.cpu.aten_inter_op_threads},
         {"omp_num_threads", optional(r.cpu.omp_num_threads)}}}};
}

}  // namespace stratum::monitor
