#include "stratum/nn/context_parallel/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/distributed/wait_context.h"

namespace stratum::nn::cp {
namespace {

using distributed::Communicator;
using distributed::P2POp;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---------------------------------------------------------------------------
// One block: queries against one rank's keys and values.

struct Block {
  at::Tensor out;  // [B, H, q, D] fp32
  at::Tensor lse;  // [B, H, q] fp32 (-inf on a row that reads nothing)
};

bool flash_cuda_applies(const at::Tensor& q) {
  return q.is_cuda() && (q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16) && q.size(-1) % 8 == 0 &&
         q.size(-1) <= 256;
}

// Where rows [from, from + rows) of a block's queries may read its keys:
// bool [B or 1, 1, rows, keys]; null: everywhere.
using RowMask = std::function<at::Tensor(int64_t from, int64_t rows)>;

RowMask causal_rows(const at::Tensor& q, int64_t keys) {
  return [device = q.device(), keys](int64_t from, int64_t rows) {
    const at::Tensor i = at::arange(from, from + rows, at::TensorOptions().dtype(at::kLong).device(device));
    const at::Tensor j = at::arange(keys, at::TensorOptions().dtype(at::kLong).device(device));
    return j.unsqueeze(0).le(i.unsqueeze(1)).view({1, 1, rows, keys});
  };
}

// Query rows a tile of the math path holds: `fixed`, or as many as keep a
// tile's fp32 scores near 2^26 elements (256 MiB), so that no block's whole
// [queries, keys] score matrix is ever held.
int64_t tile_rows(const at::Tensor& q, int64_t keys, int64_t fixed) {
  if (fixed > 0) return std::min(fixed, q.size(2));
  const int64_t per_row = std::max<int64_t>(1, q.size(0) * q.size(1) * keys);
  return std::clamp<int64_t>((int64_t{1} << 26) / per_row, 1, std::max<int64_t>(1, q.size(2)));
}

// A tile's scores in fp32, -inf where it may not read.
at::Tensor tile_scores(const at::Tensor& q_tile, const at::Tensor& kf, const RowMask& mask, int64_t from, double scale) {
  at::Tensor s = at::matmul(q_tile.to(at::kFloat), kf.transpose(-2, -1)).mul_(scale);
  if (mask) s.masked_fill_(mask(from, q_tile.size(2)).logical_not(), -INFINITY);
  return s;
}

// exp(s - lse), 0 on the rows that read nothing.
at::Tensor probabilities(const at::Tensor& s, const at::Tensor& lse) {
  const at::Tensor safe = at::where(at::isinf(lse), at::zeros_like(lse), lse);
  return at::exp(s - safe.unsqueeze(-1));
}

// The math path (what the flash kernels compute), a tile of query rows at a time.
Block math_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RowMask& mask, double scale,
                   int64_t fixed_rows) {
  const at::Tensor kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options().dtype(at::kFloat));
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  const int64_t step = tile_rows(q, k.size(2), fixed_rows);
  for (int64_t from = 0; from < q.size(2); from += step) {
    const int64_t rows = std::min(step, q.size(2) - from);
    const at::Tensor s = tile_scores(q.narrow(2, from, rows), kf, mask, from, scale);
    const at::Tensor l = at::logsumexp(s, -1);
    out.narrow(2, from, rows).copy_(at::matmul(probabilities(s, l), vf));
    lse.narrow(2, from, rows).copy_(l);
  }
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> math_backward(const at::Tensor& dout, const at::Tensor& q,
                                                             const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& out, const at::Tensor& lse,
                                                             const RowMask& mask, double scale, int64_t fixed_rows) {
  const at::Tensor kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  at::Tensor dq = at::empty(q.sizes(), q.options().dtype(at::kFloat));
  at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(at::kFloat));
  at::Tensor dv = at::zeros(v.sizes(), v.options().dtype(at::kFloat));
  const int64_t step = tile_rows(q, k.size(2), fixed_rows);
  for (int64_t from = 0; from < q.size(2); from += step) {
    const int64_t rows = std::min(step, q.size(2) - from);
    const at::Tensor qt = q.narrow(2, from, rows).to(at::kFloat);
    const at::Tensor p = probabilities(tile_scores(qt, kf, mask, from, scale), lse.narrow(2, from, rows));
    const at::Tensor g = dout.narrow(2, from, rows).to(at::kFloat);
    const at::Tensor o = out.narrow(2, from, rows).to(at::kFloat);
    dv.add_(at::matmul(p.transpose(-2, -1), g));
    const at::Tensor ds = p * (at::matmul(g, vf.transpose(-2, -1)) - (g * o).sum(-1, /*keepdim=*/true));
    dq.narrow(2, from, rows).copy_(at::matmul(ds, kf).mul_(scale));
    dk.add_(at::matmul(ds.transpose(-2, -1), qt).mul_(scale));
  }
  return {dq, dk, dv};
}

// A block without a mask (causal or whole): the flash kernels where they apply.
Block block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale,
                    int64_t fixed_rows) {
  if (q.is_cpu()) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, {}, scale);
    return {out.to(at::kFloat), lse.to(at::kFloat)};
  }
  if (flash_cuda_applies(q)) {
    auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, scale);
    return {std::get<0>(r).to(at::kFloat), std::get<1>(r).narrow(-1, 0, q.size(2)).to(at::kFloat)};
  }
  return math_forward(q, k, v, causal ? causal_rows(q, k.size(2)) : RowMask(), scale, fixed_rows);
}

// The block's share of dq, dk, dv given the merged output and log-sum-exp of its queries.
std::tuple<at::Tensor, at::Tensor, at::Tensor> block_backward(const at::Tensor& dout, const at::Tensor& q,
                                                              const at::Tensor& k, const at::Tensor& v,
                                                              const at::Tensor& out, const at::Tensor& lse,
                                                              bool causal, double scale, int64_t fixed_rows) {
  if (q.is_cpu()) {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.to(q.scalar_type()).contiguous(), q, k, v, out.to(q.scalar_type()).contiguous(), lse.contiguous(), 0.0,
        causal, {}, scale);
    return {dq, dk, dv};
  }
  if (flash_cuda_applies(q)) {
    const at::Tensor none = at::zeros({2}, q.options().dtype(at::kLong));
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
        dout.to(q.scalar_type()).contiguous(), q, k, v, out.to(q.scalar_type()).contiguous(), lse.contiguous(),
        at::Tensor(), at::Tensor(), q.size(2), k.size(2), 0.0, causal, none, none, scale);
    return {dq, dk, dv};
  }
  return math_backward(dout, q, k, v, out, lse, causal ? causal_rows(q, k.size(2)) : RowMask(), scale, fixed_rows);
}

// Merges a block over rows [from, from + block.out.size(2)) into the running output and log-sum-exp.
void merge(at::Tensor& out, at::Tensor& lse, const Block& block, int64_t from) {
  const int64_t rows = block.out.size(2);
  at::Tensor o = out.narrow(2, from, rows), l = lse.narrow(2, from, rows);
  const at::Tensor merged = at::logaddexp(l, block.lse);
  // A row that has read nothing yet on either side keeps 0 (exp(-inf - -inf) is NaN).
  const at::Tensor keep = at::nan_to_num(at::exp(l - merged), 0.0), add = at::nan_to_num(at::exp(block.lse - merged), 0.0);
  o.mul_(keep.unsqueeze(-1)).add_(block.out * add.unsqueeze(-1));
  l.copy_(merged);
}

// ---------------------------------------------------------------------------
// The ring.

// What both passes need besides the tensors (kept in the autograd context).
struct RingPlan : torch::CustomClassHolder {
  ContextShard shard;
  double scale = 1.0;
  int64_t tile_rows = 0;  // the math path's query rows a tile (0: by its memory bound)
  // Packed rows: whether any query of this rank may read a key of ring rank
  // s (live[s]); a block that none may is skipped in both passes.
  std::vector<bool> live;
};

// k and v of a rank, side by side in one buffer, so that a hop is one message.
at::Tensor pack(const at::Tensor& k, const at::Tensor& v) { return at::stack({k, v}).contiguous(); }

at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t group = heads / kv.size(1);
  return group == 1 ? kv : kv.repeat_interleave(group, 1);
}
// The gradient of expand_heads: each key/value head's query group summed.
at::Tensor sum_heads(const at::Tensor& g, int64_t kv_heads) {
  const int64_t group = g.size(1) / kv_heads;
  if (group == 1) return g;
  return g.view({g.size(0), kv_heads, group, g.size(2), g.size(3)}).sum(2);
}

// Starts sending `buffers` to the next ring rank and receiving theirs from the previous one.
distributed::WorkPtr start_hop(Communicator& ring, const std::vector<at::Tensor>& send, std::vector<at::Tensor>& recv) {
  const int64_t n = ring.size(), me = ring.rank();
  const int next = static_cast<int>((me + 1) % n), prev = static_cast<int>((me + n - 1) % n);
  std::vector<P2POp> ops;
  for (size_t i = 0; i < send.size(); ++i) {
    recv.push_back(at::empty_like(send[i]));
    ops.push_back({P2POp::Kind::send, send[i], next});
    ops.push_back({P2POp::Kind::recv, recv[i], prev});
  }
  return ring.batch_p2p(ops);
}

// Which rows of the queries meet which half of the keys of the block from
// ring rank `source`, under the zigzag split (no mask).
struct Meeting {
  int64_t q_from, q_rows, k_from, k_rows;
  bool causal;
};
Meeting zigzag_meeting(int64_t me, int64_t source, int64_t n) {
  const int64_t half = n / 2;
  if (source == me) return {0, n, 0, n, true};
  if (source < me) return {0, n, 0, half, false};  // its first chunk is before both of ours
  return {half, half, 0, n, false};                // both its chunks are before our second
}

// Packed rows: where queries of ring rank `me` may read keys of ring rank
// `source` (the same segment, not after in the whole sequence), a tile of
// query rows at a time.
RowMask packed_rows(const RingPlan& plan, int64_t me, int64_t source, c10::Device device) {
  const ContextShard& s = plan.shard;
  const auto positions = [&](int64_t r) {
    const std::vector<int64_t> p = ring_positions(s.whole_length, s.cp.split(), r);
    return at::tensor(p, at::TensorOptions().dtype(at::kLong)).to(device);
  };
  const at::Tensor qi = positions(me), ki = positions(source);
  const at::Tensor& seg = s.whole->segment_ids;
  const at::Tensor sk = seg.index_select(1, ki);
  return [qi, ki, sk, seg](int64_t from, int64_t rows) {
    const at::Tensor q_at = qi.narrow(0, from, rows);
    const at::Tensor same = seg.index_select(1, q_at).unsqueeze(2).eq(sk.unsqueeze(1));
    const at::Tensor before = ki.unsqueeze(0).le(q_at.unsqueeze(1));
    return same.logical_and(before.unsqueeze(0)).unsqueeze(1);
  };
}

// Packed rows: for each ring rank, whether any of our queries shares a
// segment with one of its keys at or before the query's position. One read
// back to the host for the whole ring: for every segment, its first key in
// that rank's block, against the last query of the segment among ours.
std::vector<bool> packed_live_blocks(const RingPlan& plan, int64_t me, int64_t ranks, c10::Device device) {
  const ContextShard& s = plan.shard;
  const at::Tensor seg = s.whole->segment_ids.to(device).to(at::kLong) + 1;  // padding (-1) as segment 0
  // A row's segment ids are below its length: no read of their maximum needed.
  const int64_t b = seg.size(0), segments = seg.size(1) + 1;
  const auto positions = [&](int64_t r) {
    return at::tensor(ring_positions(s.whole_length, s.cp.split(), r), at::TensorOptions().dtype(at::kLong)).to(device);
  };
  const at::Tensor qi = positions(me), sq = seg.index_select(1, qi);
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  // Each segment's last query position among ours (-1: none).
  const at::Tensor last_query = at::full({b, segments}, -1, options).scatter_reduce(1, sq, qi.expand_as(sq), "amax");
  std::vector<at::Tensor> meets;
  for (int64_t r = 0; r < ranks; ++r) {
    const at::Tensor ki = positions(r), sk = seg.index_select(1, ki);
    const at::Tensor first_key = at::full({b, segments}, std::numeric_limits<int64_t>::max(), options)
                                     .scatter_reduce(1, sk, ki.expand_as(sk), "amin");
    meets.push_back(first_key.le(last_query).any());
  }
  const at::Tensor flags = at::stack(meets).cpu();
  std::vector<bool> live(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) live[static_cast<size_t>(r)] = flags[r].item<bool>();
  return live;
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            c10::IValue plan_value) {
    const auto plan = c10::static_intrusive_pointer_cast<RingPlan>(plan_value.toCapsule());
    Communicator& ring = *plan->shard.cp.ring;
    const int64_t r = ring.size(), me = ring.rank(), n = q.size(2), heads = q.size(1);
    const bool packed = plan->shard.whole.has_value();
    at::Tensor out = at::zeros({q.size(0), heads, n, q.size(3)}, q.options().dtype(at::kFloat));
    at::Tensor lse = at::full({q.size(0), heads, n}, -INFINITY, q.options().dtype(at::kFloat));
    if (packed) plan->live = packed_live_blocks(*plan, me, r, q.device());
    at::Tensor kv = pack(k, v);
    for (int64_t step = 0; step < r; ++step) {
      const int64_t source = (me - step + r) % r;
      std::vector<at::Tensor> next;
      distributed::WorkPtr hop;
      if (step + 1 < r) hop = start_hop(ring, {kv}, next);  // the next block travels while this one is read
      const at::Tensor kb = expand_heads(kv[0], heads), vb = expand_heads(kv[1], heads);
      if (packed) {
        // A block no query here reads: nothing to merge.
        if (plan->live[static_cast<size_t>(source)])
          merge(out, lse,
                math_forward(q, kb, vb, packed_rows(*plan, me, source, q.device()), plan->scale, plan->tile_rows),
                0);
      } else {
        const Meeting m = zigzag_meeting(me, source, n);
        merge(out, lse,
              block_forward(q.narrow(2, m.q_from, m.q_rows).contiguous(), kb.narrow(2, m.k_from, m.k_rows).contiguous(),
                            vb.narrow(2, m.k_from, m.k_rows).contiguous(), m.causal, plan->scale, plan->tile_rows),
              m.q_from);
      }
      if (hop) {
        distributed::WaitContext waiting("ring attention: key/value block " + std::to_string(step + 1) + " of " +
                                         std::to_string(r) + " from ring rank " +
                                         std::to_string((me - step - 1 + r) % r));
        hop->wait();
        kv = next[0];
      }
    }
    ctx->saved_data["plan"] = plan_value;
    const at::Tensor result = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, result, lse});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto plan = c10::static_intrusive_pointer_cast<RingPlan>(ctx->saved_data["plan"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    Communicator& ring = *plan->shard.cp.ring;
    const int64_t r = ring.size(), me = ring.rank(), n = q.size(2), heads = q.size(1), kv_heads = k.size(1);
    const bool packed = plan->shard.whole.has_value();
    const at::Tensor dout = grads[0].contiguous();
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor kv = pack(k, v);
    // The gradient of the block in hand travels with it: zeros for our own
    // block, then what its previous reader sent. That hop is waited for only
    // after this step's block gradients are computed, so it overlaps them.
    at::Tensor dkv = at::zeros(kv.sizes(), kv.options().dtype(at::kFloat));
    std::vector<at::Tensor> arriving;
    distributed::WorkPtr dkv_hop;
    const auto receive_dkv = [&](int64_t step) {
      distributed::WaitContext waiting("ring attention backward: key/value gradients after step " +
                                       std::to_string(step) + " of " + std::to_string(r));
      dkv_hop->wait();
      dkv = arriving[0];
      arriving.clear();
    };
    for (int64_t step = 0; step < r; ++step) {
      const int64_t source = (me - step + r) % r;
      // The next block travels while this one's gradients are computed.
      std::vector<at::Tensor> next_kv;
      distributed::WorkPtr kv_hop;
      if (step + 1 < r) kv_hop = start_hop(ring, {kv}, next_kv);
      // A block no query read (packed rows) adds nothing; it and its gradient still travel on.
      const bool live = !packed || plan->live[static_cast<size_t>(source)];
      const Meeting m = packed ? Meeting{0, n, 0, n, false} : zigzag_meeting(me, source, n);
      at::Tensor bq, bk, bv;
      if (live) {
        const at::Tensor kb = expand_heads(kv[0], heads), vb = expand_heads(kv[1], heads);
        const at::Tensor qm = q.narrow(2, m.q_from, m.q_rows).contiguous();
        const at::Tensor km = kb.narrow(2, m.k_from, m.k_rows).contiguous();
        const at::Tensor vm = vb.narrow(2, m.k_from, m.k_rows).contiguous();
        const at::Tensor dm = dout.narrow(2, m.q_from, m.q_rows), om = out.narrow(2, m.q_from, m.q_rows);
        const at::Tensor lm = lse.narrow(2, m.q_from, m.q_rows);
        std::tie(bq, bk, bv) =
            packed ? math_backward(dm, qm, km, vm, om, lm, packed_rows(*plan, me, source, q.device()), plan->scale,
                                   plan->tile_rows)
                   : block_backward(dm, qm, km, vm, om, lm, m.causal, plan->scale, plan->tile_rows);
      }
      if (dkv_hop) receive_dkv(step);
      if (live) {
        dq.narrow(2, m.q_from, m.q_rows).add_(bq);
        dkv[0].narrow(2, m.k_from, m.k_rows).add_(sum_heads(bk.to(at::kFloat), kv_heads));
        dkv[1].narrow(2, m.k_from, m.k_rows).add_(sum_heads(bv.to(at::kFloat), kv_heads));
      }
      // The block's gradient on to its next reader (after the last step, home).
      dkv_hop = start_hop(ring, {dkv}, arriving);
      if (kv_hop) {
        distributed::WaitContext waiting("ring attention backward: key/value block " + std::to_string(step + 1) +
                                         " of " + std::to_string(r));
        kv_hop->wait();
        kv = next_kv[0];
      }
    }
    receive_dkv(r);
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ContextShard& shard) {
  if (!shard.cp.ring || shard.cp.ring->size() == 1)
    throw Error("ring attention: no ring group (context parallelism's method is " +
                std::string(method_name(shard.cp.method)) + ")");
  if (q.size(2) % 2 != 0 || k.size(2) != q.size(2))
    throw Error("ring attention: the ring rank holds " + std::to_string(q.size(2)) + " queries and " +
                std::to_string(k.size(2)) + " keys; the zigzag split gives it two equal chunks of both");
  auto plan = c10::make_intrusive<RingPlan>();
  plan->shard = shard;
  plan->scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  plan->tile_rows = shard.masked_tile_rows;
  return RingAttention::apply(q, k, v, c10::IValue::make_capsule(plan));
}

}  // namespace stratum::nn::cp
