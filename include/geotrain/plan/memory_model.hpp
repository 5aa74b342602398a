// Device memory of one pipeline stage: what the runtime allocates for it
// (model::Stage, model::AdamW, runtime::PipelineStep), so that the layout
// search never chooses a layout that does not fit. Pure arithmetic.
#pragma once
#include "geotrain/common/model_shape.hpp"
#include "geotrain/common/run_choices.hpp"

namespace geotrain::plan {

struct MemorySettings {
  // Weights + gradients + AdamW's two moments per parameter: the runtime
  // keeps all four in fp32 (16 bytes); mixed precision (fp16 weights and
  // gradients, fp32 master copy and moments) is 16 bytes as well.
  double state_bytes_per_parameter = 16.0;
  // How each layer's activations are kept until its backward (the runtime's
  // device.activation_storage): fp32, or bf16 (model::Stage then keeps one
  // layer's fp32 working buffers besides, and a bf16 copy of the stage's
  // input). With `recompute` (planned only, as DT-FM's fp16 runs): every
  // activation and workspace value in 16 bits.
  ActivationStorage activation_storage = ActivationStorage::fp32;
  // false (the runtime): every layer's activations stay alive per in-flight
  // micro-batch. true: only each layer's input does; one layer's full
  // activations are rebuilt in the workspace during its backward.
  bool recompute = false;
  // The last stage holds the LM head (tied to wte: a copy of it; untied,
  // ModelShape::tied_head false: its own V x C matrix), its logits and their
  // gradient; the runtime always does (it computes the loss).
  bool head = true;
  // Per device, outside the model: CUDA context, communication libraries'
  // buffers, allocator slack. Not derived from anything: a planning margin.
  double reserved_bytes = 1024.0 * 1024.0 * 1024.0;
  // Tensor parallelism (Megatron-style): > 1, the memory of ONE rank of a
  // group of t: the split weights (stage_parameters_per_rank), their state,
  // and the activations the split produces 1/t each, the rest whole
  // (src/plan/README.md, "Tensor parallelism").
  int tensor_parallel = 1;
};

// A stage's share of the model: its layer count and whether it holds the
// embeddings (first) and the head (last). A single stage is both.
struct StagePart {
  int layers = 0;
  bool first = false;
  bool last = false;
};

struct StageMemory {
  double parameters = 0;        // count, as model::parameter_layout lays them out
  double state_bytes = 0;       // parameters x state_bytes_per_parameter
  double activation_bytes = 0;  // all in-flight micro-batches' saved activations (and their tokens)
  double workspace_bytes = 0;   // backward scratch, the pipeline's receive buffer, the reserve
  double total_bytes() const { return state_bytes + activation_bytes + workspace_bytes; }
};

// `slots`: micro-batches whose activations are alive at once
// (activation_slots: GPipe m, 1F1B min(m, pp)); b sequences per micro-batch.
StageMemory stage_memory(const ModelShape& model, const StagePart& part, int micro_batch_sequences, int slots,
                         const MemorySettings& settings);

// The most layers a stage of this kind can hold within `capacity_bytes`
// (memory grows linearly with layers); -1 when not even zero layers fit.
int max_layers_within(const ModelShape& model, bool first, bool last, int micro_batch_sequences, int slots,
                      const MemorySettings& settings, double capacity_bytes);

}  // namespace geotrain::plan
