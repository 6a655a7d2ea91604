#include "stratum/nn/gemm_epilogue_cuda.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

namespace stratum::nn::cuda {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + " failed: " + cublasLtGetStatusString(s));
}

// One handle a device, made at first use (the stream goes with each call).
cublasLtHandle_t handle() {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cuBLASLt: no current CUDA device");
  std::lock_guard<std::mutex> lock(mu);
  cublasLtHandle_t& h = handles[device];
  if (!h) check(cublasLtCreate(&h), "handle creation");
  return h;
}

// The largest power of two (up to 256) dividing the address: what the
// heuristic may assume of each operand (a ZeRO flat buffer's views are not
// all 256-byte aligned).
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 2 && a % al != 0) al /= 2;
  return al;
}

// A cuBLASLt descriptor, destroyed with its scope.
template <typename Handle, cublasStatus_t (*destroy)(Handle)>
struct Owned {
  Handle h = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (h) destroy(h);
  }
};
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

template <typename T>
void set(const MatmulDesc& d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  check(cublasLtMatmulDescSetAttribute(d.h, attr, &v, sizeof(v)), "matmul attribute");
}
template <typename T>
void set(const Preference& p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  check(cublasLtMatmulPreferenceSetAttribute(p.h, attr, &v, sizeof(v)), "preference attribute");
}

// A column-major problem as cuBLAS sees it: D [m, n] = op(A) [m, k] B [k, n]
// with an epilogue reading or writing `bias` [m] and `aux` (laid out as D).
struct Problem {
  cublasLtEpilogue_t epilogue;
  cublasOperation_t transa;
  int64_t m, n, k, lda, ldb, ldd;
  const void *a, *b;
  void *d, *bias, *aux;
};

// Device, epilogue, transa, dtype, m, n, k, the lds, each pointer's alignment, workspace bytes.
using Key = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t,
                       uint32_t, uint32_t, uint32_t, size_t>;

// The heuristic's first choice, once per shape (it costs tens of µs a call);
// nullopt where it has none.
std::optional<cublasLtMatmulAlgo_t> cached_algo(const Key& key, const MatmulDesc& desc, const Layout& a,
                                                const Layout& b, const Layout& d, const Problem& p, size_t ws_bytes) {
  static std::mutex mu;
  static std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = algos.find(key); it != algos.end()) return it->second;
  Preference pref;
  check(cublasLtMatmulPreferenceCreate(&pref.h), "preference creation");
  set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ws_bytes));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(p.a));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(p.b));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(p.d));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(p.d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle(), desc.h, a.h, b.h, d.h, d.h, pref.h, 1, &result, &found);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (s == CUBLAS_STATUS_SUCCESS && found > 0) algo = result.algo;
  else if (s != CUBLAS_STATUS_NOT_SUPPORTED) check(s, "heuristic");
  algos.emplace(key, algo);
  return algo;
}

bool run(const Problem& p, Dtype dtype, GemmWorkspace ws, cudaStream_t stream) {
  if (dtype == Dtype::f32 || p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  const cudaDataType_t type = dtype == Dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  MatmulDesc desc;
  check(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor creation");
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, p.transa);
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
  set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.ldd);
  const bool ta = p.transa == CUBLAS_OP_T;
  Layout a, b, d;
  check(cublasLtMatrixLayoutCreate(&a.h, type, ta ? p.k : p.m, ta ? p.m : p.k, p.lda), "layout A");
  check(cublasLtMatrixLayoutCreate(&b.h, type, p.k, p.n, p.ldb), "layout B");
  check(cublasLtMatrixLayoutCreate(&d.h, type, p.m, p.n, p.ldd), "layout D");
  int device = 0;
  cudaGetDevice(&device);
  const Key key{device, static_cast<int>(p.epilogue), static_cast<int>(p.transa), static_cast<int>(dtype),
                p.m, p.n, p.k, p.lda, p.ldb, p.ldd,
                alignment(p.a), alignment(p.b), alignment(p.d), alignment(p.bias), alignment(p.aux), ws.bytes};
  const std::optional<cublasLtMatmulAlgo_t> algo = cached_algo(key, desc, a, b, d, p, ws.bytes);
  if (!algo) return false;
  const float one = 1.0f, zero = 0.0f;
  check(cublasLtMatmul(handle(), desc.h, &one, p.a, a.h, p.b, b.h, &zero, p.d, d.h, p.d, d.h, &*algo, ws.data,
                       ws.bytes, stream),
        "matmul");
  return true;
}

}  // namespace

// Row-major [rows, out] is column-major [out, rows]: D = pre/act with m = out,
// n = rows; A = w ([out, in] row-major is column-major [in, out], transposed).
bool gemm_bias_gelu(const void* x, const void* w, const void* bias, int64_t rows, int64_t in, int64_t out,
                    Dtype dtype, void* pre, void* act, GemmWorkspace ws, cudaStream_t stream) {
  const Problem p{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLAS_OP_T, out, rows, in, in, in, out, w, x, act,
                  const_cast<void*>(bias), pre};
  return run(p, dtype, ws, stream);
}

}  // namespace stratum::nn::cuda
