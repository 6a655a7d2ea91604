#pragma once
// Terms that keep a router's load even, from their definitions:
//
//   auxiliary loss (Switch Transformer; Megatron-Core's normalisation, 1 for
//   a perfectly even router):
//       aux = E / (k T²) Σ_e c_e Σ_t p_te
//     c_e: the tokens routed to expert e (before any capacity drop), T
//     tokens, k experts a token, p_te the token's score of e normalised over
//     the experts (a softmax's as they are; sigmoid scores divided by their sum);
//   per sequence (DeepSeek-V3's complementary sequence-wise loss): the same
//     over each sequence's tokens alone, averaged over the sequences;
//   router z-loss (ST-MoE): mean over tokens of logsumexp(logits)².
//
// Their gradients join the backward without adding the terms to the
// model's loss (Megatron's auxiliary-loss scaler): attach_aux_loss returns its
// input unchanged, and its backward gives the term the gradient `factor`
// holds when the backward runs: the factor the trainer multiplied the loss
// by (loss scale over accumulation steps). So the terms train every layer they are computed in
// under activation checkpointing (the recomputed forward attaches them) and
// on every pipeline stage, not only where the loss is.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace stratum::nn::moe {

// scores: [T, E] (fp32, differentiable); experts: int64 [T, k].
at::Tensor aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts, bool normalize_scores);
// The same per sequence: T = sequences * sequence_length, rows in sequence order.
at::Tensor sequence_aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts,
                             int64_t sequences, bool normalize_scores);
// logits: [T, E], any float dtype (computed in fp32).
at::Tensor z_loss(const at::Tensor& logits);

// Tokens routed to each expert: int64 [E] from experts [T, k].
at::Tensor tokens_per_expert(const at::Tensor& experts, int64_t num_experts);
// The same per sequence: int64 [S, E], rows of experts in sequence order.
at::Tensor tokens_per_sequence_and_expert(const at::Tensor& experts, int64_t num_experts, int64_t sequences);

// A rank's share of each term where a micro-batch's tokens are split over a
// group of ranks (sequence or context parallelism: a part of every sequence
// each): computed from the whole micro-batch's counts and token count, over
// this rank's tokens only, so the shares sum over the group to the whole
// micro-batch's term and each rank's gradient reaches its own scores alone
// (the ranks' gradients then summed: nn/moe/sparse_moe.h). With the whole
// micro-batch on one rank each share is the term.
//   counts: the whole micro-batch's assignments per expert, [E] (any dtype);
//   total_tokens: its tokens (T above).
at::Tensor aux_loss_share(const at::Tensor& scores, const at::Tensor& counts, int64_t total_tokens, int64_t top_k,
                          bool normalize_scores);
//   counts: per sequence, [S, E]; scores' rows: S sequences' slices of one
//   length, in sequence order; sequence_length: a whole sequence's tokens.
at::Tensor sequence_aux_loss_share(const at::Tensor& scores, const at::Tensor& counts, int64_t sequence_length,
                                   int64_t top_k, bool normalize_scores);
at::Tensor z_loss_share(const at::Tensor& logits, int64_t total_tokens);

// x unchanged; `term` (a scalar) receives in backward the gradient `factor`
// (a 0-dim tensor read then, not now; undefined: 1).
at::Tensor attach_aux_loss(const at::Tensor& x, const at::Tensor& term, const at::Tensor& factor);

}  // namespace stratum::nn::moe
