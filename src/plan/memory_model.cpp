// Sizes mirror model::parameter_layout and the allocations of the Stage
// constructor (src/model/gpt_stage.cpp), AdamW (two moments) and
// PipelineStep (one receive buffer); tests/model/test_memory_model.cpp
// checks them against a backend that counts what those allocate.
#include "geotrain/plan/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace geotrain::plan {
namespace {

constexpr double kFp32Bytes = 4.0, kBf16Bytes = 2.0;

// Tensors saved per layer per micro-batch of N = b*T tokens: ln1, qkv (3),
// attention output, residual, ln2, fc (4), gelu (4), layer output = 16 NC.
// Tensor parallel t: qkv, attention output, fc and gelu (12 NC) are split,
// ln1, residual, ln2 and the layer output (4 NC) are whole.
double layer_tensor_values(const ModelShape& m, double b, int t) {
  const double N = b * m.sequence_length, C = m.hidden;
  return 4.0 * N * C + 12.0 * N * C / t;
}

// Statistics saved per layer (always fp32): four layernorm statistics per
// token; the fused attention's log-sum-exp per (sequence, head, query),
// B*NH*T / t: no T x T matrix is kept.
double layer_statistics_values(const ModelShape& m, double b, int t) {
  const double N = b * m.sequence_length;
  return 4.0 * N + b * m.heads * static_cast<double>(m.sequence_length) / t;
}

double layer_activation_values(const ModelShape& m, double b, int t) {
  return layer_tensor_values(m, b, t) + layer_statistics_values(m, b, t);
}

bool stores_bf16(const MemorySettings& s) { return s.activation_storage == ActivationStorage::bf16 && !s.recompute; }

// Recomputation (planned, not run by the runtime): every value in 16 bits with
// bf16, as DT-FM's fp16 runs keep them; fp32 otherwise.
double recompute_value_bytes(const MemorySettings& s) {
  return s.activation_storage == ActivationStorage::bf16 ? kBf16Bytes : kFp32Bytes;
}

// The vocabulary one rank holds (vocabulary-parallel embedding and head).
double vocabulary_share(const ModelShape& m, int t) { return std::ceil(static_cast<double>(m.vocabulary) / t); }

// The head's saved values: final layernorm output and statistics, logits
// N*V (vocabulary-parallel: N*V/t), per-token losses.
double head_activation_values(const ModelShape& m, double b, int t) {
  const double N = b * m.sequence_length;
  return N * m.hidden + 3.0 * N + N * vocabulary_share(m, t);
}

double stage_parameters_of(const ModelShape& m, const StagePart& part, bool head, int t) {
  const double C = m.hidden;
  // t = 1: 12C^2 + 13C; split as stage_parameters_per_rank (simulator.hpp) says.
  double count = part.layers * (t > 1 ? 12.0 * C * C / t + 7.0 * C / t + 6.0 * C : 12.0 * C * C + 13.0 * C);
  const bool head_here = part.last && head;
  const bool holds_wte = part.first || (head_here && m.tied_head);  // a tied head is (a copy of) wte
  if (holds_wte) count += vocabulary_share(m, t) * C;
  if (head_here && !m.tied_head) count += vocabulary_share(m, t) * C;  // its own lm_head.weight
  if (part.first) count += static_cast<double>(m.sequence_length) * C;  // wpe
  if (part.last && head) count += 2.0 * C;                              // final layernorm
  return count;
}

// Per micro-batch: the stage input (embedding output or received
// activations), the layers' saved values, the head's, the token ids.
double slot_bytes(const ModelShape& m, const StagePart& part, double b, const MemorySettings& s) {
  const double N = b * m.sequence_length, C = m.hidden;
  const int t = std::max(1, s.tensor_parallel);
  const bool head = part.last && s.head;
  double values = 0, bf16_values = 0;
  if (stores_bf16(s)) {
    // In fp32: the input, the layers' statistics and the last layer's output
    // (sent on, or sampled). In bf16, what the backward reads back: the
    // layers' tensors (a last layer's output only for the head) and the
    // input (where layers or the head read it).
    values = N * C + part.layers * layer_statistics_values(m, b, t) + (part.layers > 0 ? N * C : 0.0);
    bf16_values = part.layers * layer_tensor_values(m, b, t);
    if (part.layers > 0 || head) bf16_values += N * C;
    if (part.layers > 0 && !head) bf16_values -= N * C;
  } else {
    const double per_layer = s.recompute ? N * C : layer_activation_values(m, b, t);  // recompute: the layer's input
    values = N * C + part.layers * per_layer;
  }
  if (head && !s.recompute) values += head_activation_values(m, b, t);
  double token_bytes = 0;
  if (part.first) token_bytes += 4.0 * N;  // input token ids (int32)
  if (head) token_bytes += 4.0 * N;        // targets
  if (s.recompute) return values * recompute_value_bytes(s) + token_bytes;
  return values * kFp32Bytes + bf16_values * kBf16Bytes + token_bytes;
}

// Backward scratch shared by all micro-batches: residual and layernorm
// gradients, qkv (3), attention output, fc and gelu (4 + 4) = 14 NC, and the
// attention backward's row sums B*NH*T; the logits' gradient on the head; the pipeline's
// receive buffer NC. With recomputation, one layer's (and the head's) full
// activations are rebuilt here too.
double workspace_bytes(const ModelShape& m, const StagePart& part, double b, const MemorySettings& s) {
  const double N = b * m.sequence_length, C = m.hidden;
  // Tensor parallel t: the residual and layernorm gradients (2 NC) and the
  // receive buffer whole, the rest split.
  const int t = std::max(1, s.tensor_parallel);
  const double attention = b * m.heads * static_cast<double>(m.sequence_length) / t;
  double values = 2.0 * N * C + 12.0 * N * C / t + attention + N * C;
  if (part.last && s.head) values += N * vocabulary_share(m, t);
  if (s.recompute) {
    if (part.layers > 0) values += layer_activation_values(m, b, t);
    if (part.last && s.head) values += head_activation_values(m, b, t);
  }
  // bf16 storage: one layer's tensors in fp32 while it runs (ln1 twice: a
  // layer writes the next one's while its own is still to be stored) and
  // two output buffers (a layer reads its predecessor's while writing its
  // own; the backward widens inputs into them, the head's too).
  if (stores_bf16(s)) {
    const bool head = part.last && s.head;
    if (part.layers > 0) values += layer_tensor_values(m, b, t);
    if (part.layers > 0 || head) values += 2.0 * N * C;
  }
  return values * (s.recompute ? recompute_value_bytes(s) : kFp32Bytes) + s.reserved_bytes;
}

}  // namespace

StageMemory stage_memory(const ModelShape& model, const StagePart& part, int micro_batch_sequences, int slots,
                         const MemorySettings& settings) {
  StageMemory memory;
  const double b = micro_batch_sequences;
  memory.parameters = stage_parameters_of(model, part, settings.head, std::max(1, settings.tensor_parallel));
  memory.state_bytes = memory.parameters * settings.state_bytes_per_parameter;
  memory.activation_bytes = slots * slot_bytes(model, part, b, settings);
  memory.workspace_bytes = workspace_bytes(model, part, b, settings);
  return memory;
}

int max_layers_within(const ModelShape& model, bool first, bool last, int micro_batch_sequences, int slots,
                      const MemorySettings& settings, double capacity_bytes) {
  const double base = stage_memory(model, {0, first, last}, micro_batch_sequences, slots, settings).total_bytes();
  if (base > capacity_bytes) return -1;
  // The first layer can add recomputation's one-layer workspace; later ones add the same amount each.
  const double one = stage_memory(model, {1, first, last}, micro_batch_sequences, slots, settings).total_bytes();
  const double two = stage_memory(model, {2, first, last}, micro_batch_sequences, slots, settings).total_bytes();
  if (one > capacity_bytes) return 0;
  const double step = two - one;
  const double extra = std::floor((capacity_bytes - one) / step);
  int layers = static_cast<int>(std::min(extra + 1.0, static_cast<double>(std::numeric_limits<int>::max() / 2)));
  // The division may round across the boundary: settle it with the model itself.
  auto fits = [&](int l) {
    return stage_memory(model, {l, first, last}, micro_batch_sequences, slots, settings).total_bytes() <= capacity_bytes;
  };
  while (layers > 1 && !fits(layers)) --layers;
  while (fits(layers + 1) && layers < std::numeric_limits<int>::max() / 2) ++layers;
  return layers;
}

}  // namespace geotrain::plan
