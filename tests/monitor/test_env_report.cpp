// The environment report: collected facts, the ds_report-style text, the JSON,
// and the stratum-report program end to end.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <torch/version.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "stratum/build_info.h"
#include "stratum/monitor/env_report.h"

namespace stratum::monitor {
namespace {

// The value of the "  label ....... value" line, or nullopt if there is none.
std::optional<std::string> value_of(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  const std::string prefix = "  " + label + " ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto dots_end = line.find_first_not_of('.', prefix.size());
    if (dots_end == prefix.size() || dots_end == std::string::npos) continue;  // no dots: other label
    return line.substr(dots_end + 1);
  }
  return std::nullopt;
}

struct ProgramRun {
  int exit_code = -1;
  std::string out;
};

ProgramRun run_program(const std::string& args) {
  const std::string program = std::string(STRATUM_BIN_DIR) + "/stratum-report";
  ProgramRun run;
  if (::access(program.c_str(), X_OK) != 0) {
    run.out = program + " is missing: build the stratum-report target first";
    return run;
  }
  const std::string command = program + " " + args;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class EnvReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { report_ = new EnvReport(collect_env_report()); }
  static void TearDownTestSuite() { delete report_; }
  static const EnvReport& report() { return *report_; }

 private:
  static EnvReport* report_;
};
EnvReport* EnvReportTest::report_ = nullptr;

TEST_F(EnvReportTest, CollectsBuildFacts) {
  EXPECT_EQ(report().build.stratum_version, STRATUM_VERSION);
  EXPECT_FALSE(report().build.git_sha.empty());
  EXPECT_EQ(report().build.build_type, STRATUM_BUILD_TYPE);
  EXPECT_FALSE(report().build.compiler.empty());
  EXPECT_GE(report().build.cxx_standard, 202002L);
}

TEST_F(EnvReportTest, TorchRuntimeVersionMatchesHeadersAndWheel) {
  const auto& t = report().torch;
  ASSERT_FALSE(t.runtime_version.empty()) << "TORCH_VERSION not found in at::show_config()";
  EXPECT_EQ(t.runtime_version, TORCH_VERSION);
  EXPECT_EQ(t.header_version, TORCH_VERSION);
  // The wheel CMake saw ("2.13.0+cpu") is the library loaded now.
  EXPECT_EQ(report().build.torch_wheel_version.rfind(t.runtime_version, 0), 0u)
      << report().build.torch_wheel_version;
  EXPECT_FALSE(t.cpu_capability.empty());
}

TEST_F(EnvReportTest, CudaFactsFollowTheBuild) {
  const auto& c = report().cuda;
#ifdef STRATUM_WITH_CUDA
  EXPECT_TRUE(c.compiled);
  EXPECT_TRUE(report().torch.built_with_cuda);
  EXPECT_FALSE(c.runtime_version.empty());
  for (const auto& g : c.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_bytes, 0u);
    EXPECT_GE(g.compute_major, 3);
  }
  EXPECT_EQ(report().torch.cuda_available, !c.gpus.empty());
#else
  EXPECT_FALSE(c.compiled);
  EXPECT_FALSE(report().torch.built_with_cuda);
  EXPECT_FALSE(report().torch.cuda_available);
  EXPECT_TRUE(c.gpus.empty());
#endif
}

TEST_F(EnvReportTest, CommunicationLibrariesAreVersioned) {
  const auto& comm = report().comm;
  EXPECT_FALSE(comm.mpi_library_version.empty());
  EXPECT_EQ(comm.mpi_library_version.find('\n'), std::string::npos);
  EXPECT_EQ(comm.mpi_library_version.find('\0'), std::string::npos);
  EXPECT_TRUE(std::regex_match(comm.mpi_standard_version, std::regex(R"(\d+\.\d+)")))
      << comm.mpi_standard_version;
#ifdef STRATUM_WITH_NCCL
  EXPECT_TRUE(std::regex_match(comm.nccl_version, std::regex(R"(2\.\d+\.\d+)"))) << comm.nccl_version;
#else
  EXPECT_TRUE(comm.nccl_version.empty());
#endif
}

TEST_F(EnvReportTest, CpuFactsArePlausible) {
  const auto& cpu = report().cpu;
  EXPECT_FALSE(cpu.model_name.empty());
  EXPECT_GE(cpu.logical_cores, 1);
  EXPECT_GE(cpu.usable_cores, 1);
  EXPECT_LE(cpu.usable_cores, cpu.logical_cores);
  EXPECT_GE(cpu.aten_intra_op_threads, 1);
#if defined(__x86_64__)
  std::vector<std::string> names;
  for (const auto& f : cpu.features) names.push_back(f.name);
  for (const char* wanted : {"avx", "avx2", "fma", "avx512f", "avx512_bf16"})
    EXPECT_NE(std::find(names.begin(), names.end(), wanted), names.end()) << wanted;
  // x86-64 CPUs that run the torch wheel have AVX2 at least (ATen's lowest fast path).
  EXPECT_TRUE(std::any_of(cpu.features.begin(), cpu.features.end(),
                          [](const CpuFeature& f) { return f.name == "avx2" && f.supported; }));
#endif
}

TEST_F(EnvReportTest, FormatGroupsTheFactsAsInDsReport) {
  const std::string text = format_env_report(report());
  for (const char* title : {"Stratum:", "Compiler / build:", "torch:", "CUDA / GPUs:", "Communication:", "CPU:"})
    EXPECT_NE(text.find(std::string("\n") + title + "\n"), std::string::npos) << title;
  EXPECT_EQ(value_of(text, "Stratum version"), STRATUM_VERSION);
  EXPECT_EQ(value_of(text, "git sha"), report().build.git_sha);
  EXPECT_EQ(value_of(text, "torch version"), report().torch.runtime_version);
  EXPECT_EQ(value_of(text, "MPI library version"), report().comm.mpi_library_version);
  EXPECT_EQ(value_of(text, "MPI standard version"), report().comm.mpi_standard_version);
  for (const auto& f : report().cpu.features)
    EXPECT_EQ(value_of(text, "CPU " + f.name), f.supported ? "yes" : "no") << f.name;
#ifndef STRATUM_WITH_CUDA
  EXPECT_EQ(value_of(text, "CUDA"), "no CUDA in this torch build");
  EXPECT_EQ(value_of(text, "NCCL version"), "not built (CPU torch)");
#endif
}

TEST_F(EnvReportTest, FormatAlignsAllValuesInOneColumn) {
  const std::string text = format_env_report(report());
  std::istringstream in(text);
  std::set<size_t> columns;
  const std::regex fact(R"(  \S.*? \.+ )");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, fact) && m.position(0) == 0) columns.insert(m.length(0));
  }
  ASSERT_FALSE(columns.empty());
  EXPECT_EQ(columns.size(), 1u) << text;
}

TEST_F(EnvReportTest, ReportsNvlsSettingOnlyWhenSet) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  const auto with = collect_env_report();
  ::unsetenv("NCCL_NVLS_ENABLE");
  const auto without = collect_env_report();
  EXPECT_EQ(with.comm.nccl_nvls_enable, "0");
  EXPECT_EQ(value_of(format_env_report(with), "NCCL_NVLS_ENABLE"), "0");
  EXPECT_FALSE(without.comm.nccl_nvls_enable.has_value());
  EXPECT_EQ(value_of(format_env_report(without), "NCCL_NVLS_ENABLE"), "(not set)");
}

TEST_F(EnvReportTest, JsonCarriesTheSameFacts) {
  const nlohmann::json j = report();
  const auto parsed = nlohmann::json::parse(j.dump());
  EXPECT_EQ(parsed, j);
  for (const char* group : {"build", "torch", "cuda", "comm", "cpu"}) EXPECT_TRUE(parsed.contains(group)) << group;
  EXPECT_EQ(parsed["build"]["stratum_version"], STRATUM_VERSION);
  EXPECT_EQ(parsed["torch"]["runtime_version"], report().torch.runtime_version);
  EXPECT_EQ(parsed["comm"]["mpi_standard_version"], report().comm.mpi_standard_version);
  EXPECT_EQ(parsed["cpu"]["logical_cores"], report().cpu.logical_cores);
  EXPECT_EQ(parsed["cpu"]["features"].size(), report().cpu.features.size());
  EXPECT_EQ(parsed["cuda"]["gpus"].size(), report().cuda.gpus.size());
}

TEST(StratumReportProgram, PrintsTheReportAndExitsZero) {
  const ProgramRun run = run_program("");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(value_of(run.out, "Stratum version"), STRATUM_VERSION);
  EXPECT_EQ(value_of(run.out, "torch version"), TORCH_VERSION);
  EXPECT_TRUE(value_of(run.out, "MPI library version").has_value());
  EXPECT_TRUE(value_of(run.out, "CPU avx2").has_value());
  EXPECT_TRUE(value_of(run.out, "ATen intra-op threads").has_value());
}

TEST(StratumReportProgram, JsonFlagPrintsParsableJson) {
  const ProgramRun run = run_program("--json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(run.out)) << run.out;
  EXPECT_EQ(j["torch"]["runtime_version"], TORCH_VERSION);
  EXPECT_FALSE(j["comm"]["mpi_library_version"].get<std::string>().empty());
}

TEST(StratumReportProgram, HelpNamesTheJsonFlag) {
  const ProgramRun run = run_program("--help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--json"), std::string::npos) << run.out;
}

TEST(StratumReportProgram, UnknownFlagFails) {
  const ProgramRun run = run_program("--no-such-flag 2>/dev/null");
  EXPECT_NE(run.exit_code, 0);
}

}  // namespace
}  // namespace stratum::monitor
