// What is communicated per training iteration: the sizes c_PP and c_DP of
// the paper's cost model (reference dtfm-paper.md §2.1), derived from a model.
#pragma once
#include <optional>
#include <string>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/common/wire_bytes.hpp"

namespace geotrain::plan {

// How the three classes of traffic are encoded on the wire (the runtime's
// compression.activations / activation_gradients / gradients). Unset: the
// model's activation_bytes / gradient_bytes per value, unencoded (fp16
// activations, fp32 gradients: the paper's assumption).
struct TrafficEncoding {
  std::optional<WireEncoding> activations, activation_gradients, gradients;
  // The tied embedding's gradient, summed every step between a pipeline's two ends (unset: fp32).
  std::optional<WireEncoding> tied_embedding;
};

// Bytes of `values` values of one class: the encoding's exact size
// (wire_encoded_bytes, the runtime's formula), or values * value_bytes.
double traffic_bytes(const std::optional<WireEncoding>& encoding, double values, int value_bytes);

// Local steps (DiLoCo-style data parallelism; the runtime's [outer] keys):
// each replica takes `local_steps` inner steps alone, then the replicas sum
// their pseudo-gradients (parameters at the last sync minus now), encoded as
// `wire`, over the data-parallel group. No gradient is exchanged between
// syncs. fragments > 1 streams the sync: a stage's parameters in that many
// equal fragments, one synchronised every local_steps / fragments steps,
// its exchange overlapping the inner steps until the next starts; 0 or 1: the
// whole stage at once, the step waiting for it (the runtime's
// outer.fragments = 1).
struct OuterSync {
  int local_steps = 0;  // H; 0: synchronous data parallelism, a gradient exchange every step
  std::optional<WireEncoding> wire;  // unset: fp32, the model's gradient bytes per value
  int fragments = 0;
  // Hierarchical: the replicas of one site (Network::site) still sum their
  // fp32 gradient every step; only the sites take local steps (the
  // runtime's outer.sync_within_site).
  bool within_site = false;
  bool enabled() const { return local_steps > 0; }
  bool streamed() const { return enabled() && fragments > 1; }
};

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
  TrafficEncoding wire;      // compressed traffic, where set
  OuterSync outer;           // local steps; off by default
};

struct Workload {
  int pipeline_stages = 1;  // D_pp
  int data_parallel = 1;    // D_dp
  double c_pp_bytes = 0;    // activations crossing one stage boundary, one replica, one iteration
  // Their gradients coming back over the same boundary; unset: c_pp_bytes
  // (the paper's model: both directions carry c_PP).
  std::optional<double> c_pp_gradient_bytes;
  double c_dp_bytes = 0;    // gradient bytes of one stage (with local steps: its pseudo-gradient)
  // Steps per data-parallel exchange (local steps: H): the cost model
  // amortises DATAP over them. 1: every step (the paper).
  int datap_period_steps = 1;
  // Local steps with outer.within_site: the stage's fp32 gradient, summed
  // every step between devices of one site (Network::site); 0: none.
  double c_dp_site_bytes = 0;
  std::string origin;       // "model" or "dtfm-original"
  TrainingShape model;
  int devices() const { return pipeline_stages * data_parallel; }
  double c_pp_back_bytes() const { return c_pp_gradient_bytes.value_or(c_pp_bytes); }
};

// Parameter count of the decoder: 12*h^2 (+13h biases/norms) per layer, token
// and position embeddings, final norm. Used for c_DP and by the simulator.
double model_parameters(const ModelShape& model);

// c_PP = (tokens_per_step / D_dp) * hidden * activation_bytes
// c_DP = model_parameters / D_pp * gradient_bytes
// then model.wire applied (encode_traffic); with model.outer enabled, c_DP
// is the pseudo-gradient under outer.wire, exchanged every H steps.
Workload workload_from_model(const TrainingShape& model, int pipeline_stages, int data_parallel);

// Re-prices c_PP (forward), the activation gradients back and c_DP under
// `wire`: each volume's value count (bytes / the workload model's bytes per
// value) encoded as wire_encoded_bytes encodes one message of that many
// values. Classes `wire` leaves unset keep their bytes.
void encode_traffic(Workload& workload, const TrafficEncoding& wire);

// Local steps: c_DP becomes the pseudo-gradient (c_DP's unencoded value
// count under outer.wire), exchanged every outer.local_steps steps; with
// outer.within_site the unencoded c_DP stays as c_dp_site_bytes, summed
// every step inside each site. Call it on an unencoded c_DP (encode_traffic
// without its gradients class).
void apply_outer_sync(Workload& workload, const OuterSync& outer);

// The constants of the original DT-FM scheduler, reproduced exactly so that
// costs compare one-to-one with its published runs (reference §2.1, §8.2):
// c_PP = 2024*2048*2*(1.25e5/2048) / 2^30 "GB" read as 1e9 bytes ... see .cpp.
Workload dtfm_original_workload(int pipeline_stages, int data_parallel);

}  // namespace geotrain::plan
