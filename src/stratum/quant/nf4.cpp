#include "stratum/quant/nf4.h"
#include "stratum/quant/nf4_dequantize.h"

#include <map>
#include <mutex>

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "stratum/core/error.h"

#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "stratum/quant/nf4_dequant_cuda.h"
#endif
#include "stratum/core/json_file.h"

namespace stratum::quant {
namespace {

// bitsandbytes' 8-bit table: [-1, 1] in 65,536 steps, each step the index of
// the code whose midpoints bracket it. Built and read in fp32 exactly as the
// package does (this file is compiled without FMA contraction).
constexpr int kSteps = 65536;

std::vector<uint8_t> step_table(const float* code) {
  float midpoints[255];
  for (int i = 0; i < 255; ++i) midpoints[i] = 0.5f * (code[i] + code[i + 1]);
  std::vector<uint8_t> table(kSteps);
  int index = 0;
  for (int i = 0; i < kSteps; ++i) {
    const float value = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kSteps - 1);
    while (index < 255 && midpoints[index] < value) ++index;
    table[static_cast<size_t>(i)] = static_cast<uint8_t>(index);
  }
  return table;
}

uint16_t step_of(float normalized) {
  normalized = std::clamp(normalized, -1.0f, 1.0f);
  const float scaled = (normalized + 1.0f) * 0.5f;
  return static_cast<uint16_t>(scaled * static_cast<float>(kSteps - 1) + 0.5f);
}

// nf4_code() as a CPU tensor, made once (every dequantization reads it).
const at::Tensor& nf4_code_tensor() {
  static const at::Tensor code = at::tensor(std::vector<float>(nf4_code().begin(), nf4_code().end()));
  return code;
}

// The code book on `device`, copied there once (a copy at every GEMM would
// be a host-to-device transfer and a stream sync each time).
at::Tensor nf4_code_on(c10::Device device) {
  if (device.is_cpu()) return nf4_code_tensor();
  static std::mutex mutex;
  static std::map<std::pair<int, int>, at::Tensor> copies;
  std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& t = copies[{static_cast<int>(device.type()), device.index()}];
  if (!t.defined()) t = nf4_code_tensor().to(device);
  return t;
}

bool valid_blocksize(int64_t b) { return b >= 32 && b <= 4096 && (b & (b - 1)) == 0; }

std::string dtype_json(at::ScalarType t) {
  return t == at::kFloat ? "float32" : t == at::kBFloat16 ? "bfloat16" : t == at::kHalf ? "float16" : "";
}

}  // namespace

int64_t Nf4Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Nf4Tensor::nbytes() const {
  int64_t n = packed.defined() ? static_cast<int64_t>(packed.nbytes()) : 0;
  if (absmax.defined()) n += static_cast<int64_t>(absmax.nbytes());
  if (nested_absmax.defined()) n += static_cast<int64_t>(nested_absmax.nbytes());
  return n;
}

const std::array<float, 16>& nf4_code() {
  static const std::array<float, 16> code = {
      -1.0f,
      static_cast<float>(-0.6961928009986877),
      static_cast<float>(-0.5250730514526367),
      static_cast<float>(-0.39491748809814453),
      static_cast<float>(-0.28444138169288635),
      static_cast<float>(-0.18477343022823334),
      static_cast<float>(-0.09105003625154495),
      0.0f,
      static_cast<float>(0.07958029955625534),
      static_cast<float>(0.16093020141124725),
      static_cast<float>(0.24611230194568634),
      static_cast<float>(0.33791524171829224),
      static_cast<float>(0.44070982933044434),
      static_cast<float>(0.5626170039176941),
      static_cast<float>(0.7229568362236023),
      1.0f};
  return code;
}

const at::Tensor& dynamic_map() {
  // 7 exponents; at exponent i, 2^i + 1 boundaries evenly in [0.1, 1] (fp32),
  // their 2^i midpoints scaled by 10^(i - 6), with both signs; then 0 and 1.
  static const at::Tensor map = [] {
    c10::AutoGradMode no_grad(false);
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
      const at::Tensor boundaries = at::linspace(0.1, 1, (int64_t{1} << i) + 1, at::kFloat);
      const int64_t k = boundaries.numel();
      const at::Tensor means = (boundaries.narrow(0, 0, k - 1) + boundaries.narrow(0, 1, k - 1)) / 2.0;
      const double scale = std::pow(10.0, -6 + i);
      for (const at::Tensor& t : {means * scale, means * -scale}) {
        const at::Tensor c = t.contiguous();
        data.insert(data.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      }
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    return at::tensor(data);
  }();
  return map;
}

std::pair<at::Tensor, at::Tensor> quantize_blockwise_8bit(const at::Tensor& values, const at::Tensor& code,
                                                          int64_t blocksize) {
  if (code.numel() != 256 || code.scalar_type() != at::kFloat)
    throw Error("quantize_blockwise_8bit: the code must be 256 fp32 values, got " + std::to_string(code.numel()) +
                " " + std::string(c10::toString(code.scalar_type())));
  if (blocksize < 1) throw Error("quantize_blockwise_8bit: blocksize " + std::to_string(blocksize));
  const at::Tensor c = code.to(at::kCPU).contiguous();
  const std::vector<uint8_t> table = step_table(c.data_ptr<float>());
  const at::Tensor a = values.to(at::kCPU, at::kFloat).contiguous().reshape(-1);
  const int64_t n = a.numel(), blocks = (n + blocksize - 1) / blocksize;
  at::Tensor out = at::zeros({n}, at::kByte), absmax = at::empty({blocks}, at::kFloat);
  const float* in = a.data_ptr<float>();
  uint8_t* q = out.data_ptr<uint8_t>();
  float* m = absmax.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * blocksize, end = std::min(begin + blocksize, n);
    float block_max = 0.0f;
    for (int64_t i = begin; i < end; ++i) block_max = std::max(block_max, std::fabs(in[i]));
    m[b] = block_max;
    if (block_max == 0.0f) continue;  // indices 0, as the package writes
    const float inverse = 1.0f / block_max;
    for (int64_t i = begin; i < end; ++i) q[i] = table[step_of(in[i] * inverse)];
  }
  return {out, absmax};
}

Nf4Tensor quantize_nf4(const at::Tensor& weight, int64_t blocksize, bool double_quant) {
  if (!valid_blocksize(blocksize))
    throw Error("NF4: blocksize " + std::to_string(blocksize) + " is not a power of two from 32 to 4096");
  if (dtype_json(weight.scalar_type()).empty())
    throw Error(std::string("NF4: quantizes fp32, bf16 or fp16 weights, not ") + c10::toString(weight.scalar_type()));
  if (weight.numel() == 0) throw Error("NF4: the weight has no elements");
  c10::AutoGradMode no_grad(false);
  // bitsandbytes' own sequence of ATen operations, so the scaled values are
  // the same floats; on the weight's device (IEEE division and comparisons:
  // the same codes on a GPU).
  const at::Tensor flat = weight.detach().reshape(-1).to(at::kFloat);
  const int64_t n = flat.numel(), rest = n % blocksize, full = n - rest;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(weight.device());
  at::Tensor absmax = at::empty({0}, f32), scaled = at::empty({0}, f32);
  if (full > 0) {
    const at::Tensor blocks = flat.narrow(0, 0, full).reshape({full / blocksize, blocksize});
    absmax = std::get<0>(blocks.abs().max(-1));
    scaled = at::clamp(blocks * (at::reciprocal(absmax.clamp_min(1e-38)) * 1.0).view({-1, 1}), -1, 1).reshape(-1);
  }
  if (rest > 0) {
    const at::Tensor tail = flat.narrow(0, full, rest);
    const at::Tensor tail_max = tail.abs().max().clamp_min(1e-38);
    absmax = at::cat({absmax, tail_max.unsqueeze(0)});
    scaled = at::cat({scaled, at::clamp(tail / tail_max, -1, 1)});
  }
  if (scaled.numel() % 2) scaled = at::constant_pad_nd(scaled, {0, 1});
  const at::Tensor code = nf4_code_on(weight.device());
  const at::Tensor bounds = (code.narrow(0, 0, 15) + code.narrow(0, 1, 15)) / 2;
  const at::Tensor q = at::bucketize(scaled, bounds, /*out_int32=*/true).to(at::kByte);
  Nf4Tensor out;
  out.packed = at::bitwise_or(at::bitwise_left_shift(q.slice(0, 0, q.numel(), 2), 4), q.slice(0, 1, q.numel(), 2))
                   .contiguous();
  out.blocksize = blocksize;
  out.shape = weight.sizes().vec();
  out.dtype = weight.scalar_type();
  if (!double_quant) {
    out.absmax = absmax;
    return out;
  }
  out.nested = true;
  // The absmax (a 64th of the weight's size) on the host: its mean summed in
  // the host's order (a GPU's reduction rounds otherwise), then bitsandbytes' host table.
  const at::Tensor host_absmax = absmax.cpu();
  const at::Tensor offset = host_absmax.mean();
  out.offset = offset.item<float>();
  auto [codes, nested_absmax] = quantize_blockwise_8bit(host_absmax - offset, dynamic_map(), out.nested_blocksize);
  out.absmax = codes.to(weight.device());
  out.nested_absmax = nested_absmax.to(weight.device());
  out.nested_code = dynamic_map().to(weight.device());
  return out;
}

at::Tensor nf4_absmax(const Nf4Tensor& q) {
  if (!q.nested) return q.absmax.to(at::kFloat);
  c10::AutoGradMode no_grad(false);
  const int64_t blocks = q.absmax.numel();
  const at::Tensor scales =
      q.nested_absmax.to(at::kFloat).repeat_interleave(q.nested_blocksize).narrow(0, 0, blocks);
  const at::Tensor& code = q.nested_code.defined() ? q.nested_code : dynamic_map();
  at::Tensor absmax = code.to(q.absmax.device(), at::kFloat).index({q.absmax.to(at::kLong)}) * scales;
  return absmax.add_(q.offset);
}

at::Tensor dequantize_nf4(const Nf4Tensor& q) {
  at::Tensor out = at::empty(q.shape, q.packed.options().dtype(q.dtype));
  dequantize_nf4_into(q, out);
  return out;
}

void dequantize_nf4_into(const Nf4Tensor& q, const at::Tensor& out) {
  if (!out.defined() || !out.is_contiguous() || out.numel() != q.numel() || out.scalar_type() != q.dtype ||
      out.device() != q.packed.device())
    throw Error("NF4: the buffer to dequantize into must be contiguous, " + std::to_string(q.numel()) + " values of " +
                std::string(c10::toString(q.dtype)) + " on " + q.packed.device().str());
  c10::AutoGradMode no_grad(false);
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (q.packed.is_cuda() && q.absmax.is_cuda() && (!q.nested || (q.nested_absmax.is_cuda() && q.nested_code.is_cuda())) &&
      (q.dtype == at::kBFloat16 || q.dtype == at::kHalf || q.dtype == at::kFloat)) {
    const c10::cuda::CUDAGuard guard(q.packed.device());
    cuda::Nf4View v;
    const at::Tensor code = nf4_code_on(q.packed.device());
    const at::Tensor packed = q.packed.contiguous(), absmax = q.absmax.contiguous();
    v.code = code.data_ptr<float>();
    v.packed = packed.data_ptr<uint8_t>();
    v.n = q.numel();
    v.blocksize = q.blocksize;
    at::Tensor scales, nested_code;  // fp32: the nested scales, or the blocks' own absmax
    if (q.nested) {
      scales = q.nested_absmax.to(at::kFloat).contiguous();
      nested_code = q.nested_code.to(at::kFloat).contiguous();
      v.absmax_codes = absmax.data_ptr<uint8_t>();
      v.nested_absmax = scales.data_ptr<float>();
      v.nested_code = nested_code.data_ptr<float>();
      v.nested_blocksize = q.nested_blocksize;
      v.offset = q.offset;
    } else {
      scales = absmax.to(at::kFloat);
      v.absmax = scales.data_ptr<float>();
    }
    const stratum::cuda::Dtype dt = q.dtype == at::kBFloat16 ? stratum::cuda::Dtype::bf16
                                    : q.dtype == at::kHalf   ? stratum::cuda::Dtype::f16
                                                             : stratum::cuda::Dtype::f32;
    const cudaError_t e =
        cuda::launch_nf4_dequantize(v, out.data_ptr(), dt, c10::cuda::getCurrentCUDAStream().stream());
    if (e != cudaErrorInvalidValue) {  // invalid: a layout the kernel does not take, the ATen path below does
      stratum::cuda::check_launch(e, "NF4: dequantize kernel");
      return;
    }
  }
#endif
  const int64_t n = q.numel(), blocks = q.blocks();
  const at::Tensor bytes = q.packed.reshape(-1);
  const at::Tensor indices = at::stack({at::bitwise_right_shift(bytes, 4), at::bitwise_and(bytes, 0x0F)}, 1)
                                 .reshape(-1)
                                 .narrow(0, 0, n)
                                 .to(at::kLong);
  at::Tensor values = nf4_code_on(bytes.device()).index({indices});
  const at::Tensor padded = at::constant_pad_nd(values, {0, blocks * q.blocksize - n});
  values = (padded.view({blocks, q.blocksize}) * nf4_absmax(q).view({-1, 1})).reshape(-1).narrow(0, 0, n);
  out.view({-1}).copy_(values.to(q.dtype));
}

Nf4Tensor nf4_from_bitsandbytes(const std::string& name, const std::function<at::Tensor(const std::string&)>& get,
                                const std::string& source) {
  const std::string where = source + ": " + name;
  auto need = [&](const std::string& suffix) {
    at::Tensor t = get(name + suffix);
    if (!t.defined())
      throw Error(where + ": no tensor '" + name + suffix + "' (a bitsandbytes 4-bit weight stores its quant state "
                  "beside it)");
    return t.to(at::kCPU);
  };
  const at::Tensor state_bytes = need(".quant_state.bitsandbytes__nf4");
  if (get(name + ".quant_state.bitsandbytes__fp4").defined())
    throw Error(where + ": stored in bitsandbytes' FP4, not NF4; only NF4 weights load");
  if (state_bytes.scalar_type() != at::kByte || state_bytes.dim() != 1)
    throw Error(where + ".quant_state.bitsandbytes__nf4: expected the quant state's JSON as uint8 bytes");
  const at::Tensor sb = state_bytes.contiguous();
  const std::string text(reinterpret_cast<const char*>(sb.data_ptr<uint8_t>()), static_cast<size_t>(sb.numel()));
  const nlohmann::json state = parse_json_text(text, where + ".quant_state.bitsandbytes__nf4", "a bitsandbytes quant state");
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!state.is_object() || !state.contains(key))
      throw Error(where + ".quant_state.bitsandbytes__nf4: no \"" + std::string(key) + "\"");
    return state.at(key);
  };
  if (field("quant_type") != "nf4")
    throw Error(where + ": quant_type " + field("quant_type").dump() + "; only \"nf4\" weights load");
  Nf4Tensor q;
  const nlohmann::json& blocksize = field("blocksize");
  if (!blocksize.is_number_integer() || !valid_blocksize(blocksize.get<int64_t>()))
    throw Error(where + ": blocksize " + blocksize.dump() + " is not a power of two from 32 to 4096");
  q.blocksize = blocksize.get<int64_t>();
  const std::string dtype = field("dtype").is_string() ? field("dtype").get<std::string>() : "";
  q.dtype = dtype == "float32" ? at::kFloat : dtype == "bfloat16" ? at::kBFloat16 : dtype == "float16" ? at::kHalf
                                                                                                        : at::kByte;
  if (q.dtype == at::kByte) throw Error(where + ": dtype " + field("dtype").dump() + "; expected float32, bfloat16 or float16");
  const nlohmann::json& shape = field("shape");
  if (!shape.is_array() || shape.empty()) throw Error(where + ": shape " + shape.dump() + " is not a list of sizes");
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (int64_t{1} << 40))
      throw Error(where + ": shape " + shape.dump() + " has a size that is not a positive integer");
    q.shape.push_back(d.get<int64_t>());
  }
  if (q.numel() > (int64_t{1} << 42)) throw Error(where + ": shape " + shape.dump() + " is too large");
  q.packed = need("").reshape(-1);
  if (q.packed.scalar_type() != at::kByte) throw Error(where + ": the packed weight is not uint8");
  if (q.packed.numel() != (q.numel() + 1) / 2)
    throw Error(where + ": " + std::to_string(q.packed.numel()) + " packed bytes for shape " + shape.dump() + " (" +
                std::to_string(q.numel()) + " values need " + std::to_string((q.numel() + 1) / 2) + ")");
  const at::Tensor quant_map = need(".quant_map");
  if (!quant_map.to(at::kFloat).reshape(-1).equal(nf4_code_tensor()))
    throw Error(where + ".quant_map: not NF4's 16 values");
  q.absmax = need(".absmax").reshape(-1);
  if (q.absmax.numel() != q.blocks())
    throw Error(where + ".absmax: " + std::to_string(q.absmax.numel()) + " values for " + std::to_string(q.blocks()) +
                " blocks of " + std::to_string(q.blocksize));
  q.nested = state.contains("nested_offset");
  if (!q.nested) {
    if (q.absmax.scalar_type() != at::kFloat) throw Error(where + ".absmax: expected fp32 without double quantization");
    return q;
  }
  if (q.absmax.scalar_type() != at::kByte) throw Error(where + ".absmax: expected uint8 under double quantization");
  const nlohmann::json& offset = field("nested_offset");
  const nlohmann::json nested_blocksize = state.contains("nested_blocksize") ? state.at("nested_blocksize") : nlohmann::json(256);
  if (!offset.is_number() || !std::isfinite(offset.get<double>()))
    throw Error(where + ": nested_offset " + offset.dump() + " is not a finite number");
  if (!nested_blocksize.is_number_integer() || nested_blocksize.get<int64_t>() < 1 ||
      nested_blocksize.get<int64_t>() > 4096)
    throw Error(where + ": nested_blocksize " + nested_blocksize.dump() + " is not 1 to 4096");
  q.offset = offset.get<float>();
  q.nested_blocksize = nested_blocksize.get<int64_t>();
  q.nested_absmax = need(".nested_absmax").reshape(-1).to(at::kFloat);
  const int64_t nested_blocks = (q.blocks() + q.nested_blocksize - 1) / q.nested_blocksize;
  if (q.nested_absmax.numel() != nested_blocks)
    throw Error(where + ".nested_absmax: " + std::to_string(q.nested_absmax.numel()) + " values for " +
                std::to_string(nested_blocks) + " blocks of " + std::to_string(q.nested_blocksize));
  // bitsandbytes' dynamic map, as the file has it (older CPU builds wrote its first value as -1).
  q.nested_code = need(".nested_quant_map").reshape(-1).to(at::kFloat).contiguous();
  if (q.nested_code.numel() != 256 || !q.nested_code.isfinite().all().item<bool>() ||
      q.nested_code.abs().max().item<float>() > 1.0f)
    throw Error(where + ".nested_quant_map: expected 256 finite values in [-1, 1], got " +
                std::to_string(q.nested_code.numel()));
  return q;
}

}  // namespace stratum::quant
