// What is communicated per training iteration: the sizes c_PP and c_DP of
// the paper's cost model (reference dtfm-paper.md §2.1), derived from a model.
#pragma once
#include <string>

#include "geotrain/common/model_shape.hpp"

namespace geotrain::plan {

// A model as the cost model sees it: its shape, the tokens of one global
// batch (every replica's micro-batches) and the bytes of a value on the wire.
// Default: the paper's GPT3-XL, batch 1024 sequences, fp16 activations.
struct TrainingShape : ModelShape {
  TrainingShape() : ModelShape(gpt3_xl_shape()) {}
  TrainingShape(const ModelShape& shape, double tokens, int activation_value_bytes, int gradient_value_bytes)
      : ModelShape(shape),
        tokens_per_step(tokens),
        activation_bytes(activation_value_bytes),
        gradient_bytes(gradient_value_bytes) {}
  double tokens_per_step = 1024.0 * 2048.0;
  int activation_bytes = 2;  // fp16 activations on the wire
  int gradient_bytes = 4;    // fp32 gradients in the exchange
};

struct Workload {
  int pipeline_stages = 1;  // D_pp
  int data_parallel = 1;    // D_dp
  double c_pp_bytes = 0;    // activations crossing one stage boundary, one replica, one iteration
  double c_dp_bytes = 0;    // gradient bytes of one stage
  std::string origin;       // "model" or "dtfm-original"
  TrainingShape model;
  int devices() const { return pipeline_stages * data_parallel; }
};

// Parameter count of the decoder: 12*h^2 (+13h biases/norms) per layer, token
// and position embeddings, final norm. Used for c_DP and by the simulator.
double model_parameters(const ModelShape& model);

// c_PP = (tokens_per_step / D_dp) * hidden * activation_bytes
// c_DP = model_parameters / D_pp * gradient_bytes
Workload workload_from_model(const TrainingShape& model, int pipeline_stages, int data_parallel);

// The constants of the original DT-FM scheduler, reproduced exactly so that
// costs compare one-to-one with its published runs (reference §2.1, §8.2):
// c_PP = 2024*2048*2*(1.25e5/2048) / 2^30 "GB" read as 1e9 bytes ... see .cpp.
Workload dtfm_original_workload(int pipeline_stages, int data_parallel);

}  // namespace geotrain::plan
