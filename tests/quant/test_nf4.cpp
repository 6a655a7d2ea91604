// NF4 against what bitsandbytes 0.50.2 wrote on the CPU (bitsandbytes_nf4.safetensors,
// write_bitsandbytes_nf4.py): the same packed bytes, block scales and double
// quantization bit for bit, the same dequantized weights; and against the
// QLoRA paper's code book (normal quantiles).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "stratum/core/error.h"
#include "stratum/io/safetensors.h"
#include "stratum/quant/nf4.h"

namespace {

using stratum::quant::Nf4Tensor;

const std::string kFile = std::string(STRATUM_SOURCE_DIR) + "/tests/quant/bitsandbytes_nf4.safetensors";

const std::map<std::string, at::Tensor>& written() {
  static const std::map<std::string, at::Tensor> t = stratum::io::read_safetensors(kFile);
  return t;
}

Nf4Tensor from_file(const std::string& name, std::map<std::string, at::Tensor> tensors = written()) {
  return stratum::quant::nf4_from_bitsandbytes(
      name, [&](const std::string& key) { return tensors.count(key) ? tensors.at(key) : at::Tensor(); }, "nf4.safetensors");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Nf4, QuantizesBitForBitAsBitsandbytes) {
  for (const std::string name : {"a", "b", "c"}) {
    const at::Tensor source = written().at(name + ".source");
    const Nf4Tensor theirs = from_file(name + ".weight");
    const Nf4Tensor ours = stratum::quant::quantize_nf4(source, 64, /*double_quant=*/name != "c");
    EXPECT_EQ(ours.nested, theirs.nested) << name;
    EXPECT_EQ(ours.shape, theirs.shape) << name;
    EXPECT_EQ(ours.dtype, theirs.dtype) << name;
    EXPECT_TRUE(ours.packed.equal(theirs.packed)) << name << ": packed values";
    EXPECT_TRUE(ours.absmax.equal(theirs.absmax)) << name << ": block scales";
    if (ours.nested) {
      EXPECT_TRUE(ours.nested_absmax.equal(theirs.nested_absmax)) << name;
      EXPECT_EQ(ours.offset, theirs.offset) << name << ": the absmax mean";
      EXPECT_TRUE(ours.nested_code.equal(theirs.nested_code)) << name << ": the dynamic map";
      EXPECT_EQ(ours.nested_absmax.numel(), name == "a" ? 2 : 1) << name;
    }
    // 4 bits a value and the scales: about a quarter of bf16's bytes.
    EXPECT_LE(ours.nbytes(), source.numel() / 2 + source.numel() / 64 * 4 + 64) << name;
  }
}

// The 8-bit step alone on 8,192 values: bitsandbytes' 65,536-step table, not
// the nearest code (they differ on about one value in a thousand).
TEST(Nf4, EightBitBlockwiseStepIsBitsandbytes) {
  const at::Tensor code = written().at("blockwise.code");
  EXPECT_TRUE(code.equal(stratum::quant::dynamic_map()));
  auto [codes, absmax] = stratum::quant::quantize_blockwise_8bit(written().at("blockwise.source"), code, 256);
  EXPECT_TRUE(absmax.equal(written().at("blockwise.absmax")));
  const at::Tensor theirs = written().at("blockwise.codes");
  EXPECT_EQ(codes.ne(theirs).sum().item<int64_t>(), 0) << "values quantized otherwise";
}

TEST(Nf4, DequantizesAsBitsandbytes) {
  for (const std::string name : {"a", "b", "c"}) {
    const Nf4Tensor q = from_file(name + ".weight");
    const at::Tensor theirs = written().at(name + ".dequantized");
    const at::Tensor ours = stratum::quant::dequantize_nf4(q);
    EXPECT_EQ(ours.scalar_type(), theirs.scalar_type()) << name;
    EXPECT_EQ(ours.sizes(), theirs.sizes()) << name;
    EXPECT_TRUE(ours.equal(theirs)) << name << ": largest difference "
                                    << (ours.to(at::kFloat) - theirs.to(at::kFloat)).abs().max().item<float>();
  }
}

// The code book is the paper's: 8 positive and 7 negative normal quantiles
// (offset 0.9677083), each side scaled to [-1, 1], with an exact zero.
TEST(Nf4, CodeBookIsThePapersNormalQuantiles) {
  auto icdf = [](double p) {  // the standard normal's quantile, by bisection on erfc
    double lo = -10, hi = 10;
    for (int i = 0; i < 200; ++i) {
      const double mid = (lo + hi) / 2;
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    return (lo + hi) / 2;
  };
  // bitsandbytes' create_normal_map: the quantiles of 8 probabilities evenly
  // from the offset towards 0.5, and the negated quantiles of 7.
  const double offset = 0.9677083;
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(icdf(offset + (0.5 - offset) * i / 8.0));
  for (int i = 0; i < 7; ++i) v.push_back(-icdf(offset + (0.5 - offset) * i / 7.0));
  v.push_back(0.0);
  std::sort(v.begin(), v.end());
  const double max = *std::max_element(v.begin(), v.end());
  const auto& code = stratum::quant::nf4_code();
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(code[i], v[i] / max, 1e-6) << "value " << i;
  EXPECT_EQ(code[7], 0.0f);
}

// Quantizing and back: each value within half a code step of its block's
// scale; the largest of a block exact; a zero block zero.
TEST(Nf4, RoundTripStaysWithinHalfAStep) {
  at::Tensor w = at::randn({33, 64}, at::TensorOptions().dtype(at::kFloat)) * 0.05;
  w[2].zero_();
  const Nf4Tensor q = stratum::quant::quantize_nf4(w, 64, true);
  const at::Tensor back = stratum::quant::dequantize_nf4(q);
  const at::Tensor scale = w.abs().amax(1, true);
  // The widest gap between NF4 values is 1 - 0.7230; half of it, plus the 8-bit error of the scale.
  EXPECT_LE(((back - w).abs() / scale.clamp_min(1e-12)).max().item<float>(), 0.1386 + 0.02);
  EXPECT_TRUE(back[2].eq(0).all().item<bool>());
  const at::Tensor plain = stratum::quant::dequantize_nf4(stratum::quant::quantize_nf4(w, 64, false));
  EXPECT_TRUE(plain.abs().amax(1).sub(w.abs().amax(1)).abs().max().item<float>() < 1e-7);
}

TEST(Nf4, BadCheckpointTensorsAreNamed) {
  auto with = [](const std::string& key, const at::Tensor& t) {
    std::map<std::string, at::Tensor> m = written();
    if (t.defined()) m[key] = t;
    else m.erase(key);
    return error_of([&] { from_file("a.weight", m); });
  };
  EXPECT_NE(with("a.weight.absmax", at::Tensor()).find("nf4.safetensors: a.weight: no tensor 'a.weight.absmax'"),
            std::string::npos);
  EXPECT_NE(with("a.weight", at::zeros({10}, at::kByte)).find("10 packed bytes for shape [150,128]"), std::string::npos)
      << with("a.weight", at::zeros({10}, at::kByte));
  EXPECT_NE(with("a.weight.quant_map", at::linspace(-1, 1, 16)).find("a.weight.quant_map: not NF4's 16 values"),
            std::string::npos);
  EXPECT_NE(with("a.weight.absmax", at::zeros({7}, at::kByte)).find("a.weight.absmax: 7 values for 300 blocks of 64"),
            std::string::npos);
  EXPECT_NE(with("a.weight.nested_absmax", at::ones({5})).find("5 values for 2 blocks of 256"), std::string::npos);
  auto state = [&](const std::string& json) {
    at::Tensor t = at::empty({static_cast<int64_t>(json.size())}, at::kByte);
    std::memcpy(t.data_ptr(), json.data(), json.size());
    return with("a.weight.quant_state.bitsandbytes__nf4", t);
  };
  EXPECT_NE(state(R"({"quant_type": "fp4", "blocksize": 64, "dtype": "bfloat16", "shape": [150, 128]})")
                .find("quant_type \"fp4\"; only \"nf4\" weights load"),
            std::string::npos);
  EXPECT_NE(state(R"({"quant_type": "nf4", "blocksize": 48, "dtype": "bfloat16", "shape": [150, 128]})")
                .find("blocksize 48 is not a power of two"),
            std::string::npos);
  EXPECT_NE(state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "int8", "shape": [150, 128]})")
                .find("dtype \"int8\""),
            std::string::npos);
  EXPECT_NE(state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [150, -128]})")
                .find("not a positive integer"),
            std::string::npos);
  EXPECT_NE(state(R"({"quant_type": "nf4", "blocksize": 64)").find("a.weight.quant_state.bitsandbytes__nf4"),
            std::string::npos);
  EXPECT_NE(error_of([] { stratum::quant::quantize_nf4(at::ones({4, 4}, at::kInt)); }).find("not Int"),
            std::string::npos);
  EXPECT_NE(error_of([] { stratum::quant::quantize_nf4(at::ones({4, 4}), 100); }).find("blocksize 100"),
            std::string::npos);
}

TEST(Nf4, OnTheGpuQuantizesAndDequantizesAsOnTheHost) {
  // The fused dequantize kernel and the quantization run on the device give
  // the host path's codes and values bit for bit (bf16, fp16, fp32; a tail
  // shorter than a block; no double quantization too).
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU";
  at::manual_seed(0);
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat})
    for (int64_t n : {int64_t{4096} * 64, int64_t{1000}, int64_t{72}})
      for (bool nested : {true, false}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " n " + std::to_string(n) + (nested ? " nested" : ""));
        const at::Tensor w = at::randn({n}, at::kFloat).mul(0.02).to(dtype);
        const stratum::quant::Nf4Tensor host = stratum::quant::quantize_nf4(w, 64, nested);
        const stratum::quant::Nf4Tensor gpu = stratum::quant::quantize_nf4(w.cuda(), 64, nested);
        EXPECT_TRUE(at::equal(gpu.packed.cpu(), host.packed));
        EXPECT_TRUE(at::equal(gpu.absmax.cpu(), host.absmax));
        EXPECT_EQ(gpu.offset, host.offset);
        EXPECT_TRUE(at::equal(stratum::quant::dequantize_nf4(gpu).cpu(), stratum::quant::dequantize_nf4(host)));
      }
}
