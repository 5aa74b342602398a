#include "geotrain/plan/workload.hpp"

namespace geotrain::plan {

double traffic_bytes(const std::optional<WireEncoding>& encoding, double values, int value_bytes) {
  return encoding ? wire_encoded_bytes(*encoding, values) : values * value_bytes;
}

void encode_traffic(Workload& w, const TrafficEncoding& wire) {
  const double activations = w.c_pp_bytes / w.model.activation_bytes;
  const double gradients = w.c_dp_bytes / w.model.gradient_bytes;
  if (wire.activation_gradients) {
    w.c_pp_gradient_bytes = traffic_bytes(wire.activation_gradients, w.c_pp_back_bytes() / w.model.activation_bytes,
                                          w.model.activation_bytes);
  }
  if (wire.activations) {
    if (!w.c_pp_gradient_bytes) w.c_pp_gradient_bytes = w.c_pp_bytes;  // the way back keeps its size
    w.c_pp_bytes = traffic_bytes(wire.activations, activations, w.model.activation_bytes);
  }
  if (wire.gradients) w.c_dp_bytes = traffic_bytes(wire.gradients, gradients, w.model.gradient_bytes);
}

void apply_outer_sync(Workload& w, const OuterSync& outer) {
  if (!outer.enabled()) return;
  const double gradients = w.c_dp_bytes / w.model.gradient_bytes;
  if (outer.within_site) w.c_dp_site_bytes = gradients * w.model.gradient_bytes;
  w.c_dp_bytes = traffic_bytes(outer.wire, gradients, w.model.gradient_bytes);
  w.datap_period_steps = outer.local_steps;
}

double model_parameters(const ModelShape& m) {
  const double h = m.hidden;
  // Per block: QKV (3h^2 + 3h), output (h^2 + h), MLP (8h^2 + 5h), two norms (4h).
  const double per_layer = 12.0 * h * h + 13.0 * h;
  const double embeddings = static_cast<double>(m.vocabulary) * h +
                            static_cast<double>(m.sequence_length) * h;
  return m.layers * per_layer + embeddings + 2.0 * h;  // + final norm
}

Workload workload_from_model(const TrainingShape& model, int pipeline_stages, int data_parallel) {
  Workload w;
  w.pipeline_stages = pipeline_stages;
  w.data_parallel = data_parallel;
  w.model = model;
  w.origin = "model";
  // Each replica pushes its share of the global batch through every boundary.
  w.c_pp_bytes = model.tokens_per_step / data_parallel * model.hidden * model.activation_bytes;
  // Each stage exchanges the gradient of its share of the parameters.
  w.c_dp_bytes = model_parameters(model) / pipeline_stages * model.gradient_bytes;
  TrafficEncoding wire = model.wire;
  if (model.outer.enabled()) wire.gradients.reset();  // no per-step gradient exchange to encode
  encode_traffic(w, wire);
  apply_outer_sync(w, model.outer);
  return w;
}

Workload dtfm_original_workload(int pipeline_stages, int data_parallel) {
  Workload w;
  w.pipeline_stages = pipeline_stages;
  w.data_parallel = data_parallel;
  w.origin = "dtfm-original";
  // The original scheduler's constants, verbatim (reference §2.1): activations
  // 2024 (sic, for 2048) tokens * 2048 hidden * 2 bytes * 1.25e5/2048
  // sequences, divided by 2^30 and then read as "GB" = 1e9 bytes; gradients
  // 1.3e9 params * 4 bytes * 3/24 layers. They do not depend on D_pp, D_dp.
  w.c_pp_bytes = 2024.0 * 2048.0 * 2.0 * (1.25e5 / 2048.0) / 1073741824.0 * 1e9;
  w.c_dp_bytes = 1.3e9 * 4.0 * 3.0 / 24.0;
  return w;
}

}  // namespace geotrain::plan
