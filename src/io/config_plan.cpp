#include "geotrain/io/config_plan.hpp"

namespace geotrain::io {

plan::OuterSync outer_sync(const Config& config) {
  plan::OuterSync outer;
  outer.local_steps = config.outer.local_steps;
  outer.fragments = config.outer.fragments;
  outer.within_site = config.outer.sync_within_site;
  outer.wire = config.compression.lossy_encoding(config.compression.gradients);
  return outer;
}

plan::TrafficEncoding traffic_encoding(const Config& config) {
  const CompressionSettings& wire = config.compression;
  return {wire.lossy_encoding(wire.activations), wire.lossy_encoding(wire.activation_gradients),
          wire.lossy_encoding(wire.gradients), wire.lossy_encoding(wire.tied_embedding)};
}

plan::TrainingShape training_shape(const Config& config, const ModelShape& model, int global_batch_sequences) {
  plan::TrainingShape shape(model, static_cast<double>(global_batch_sequences) * model.sequence_length, 4, 4);
  shape.wire = traffic_encoding(config);
  shape.outer = outer_sync(config);
  return shape;
}

plan::DataParallelScheme dp_scheme(DataParallelExchange exchange) {
  switch (exchange) {
    case DataParallelExchange::hierarchical: return plan::DataParallelScheme::hierarchical;
    case DataParallelExchange::automatic: return plan::DataParallelScheme::automatic;
    case DataParallelExchange::direct: break;
  }
  return plan::DataParallelScheme::direct;
}

plan::SimulationConfig simulation_config(const Config& config, const ModelShape& model, int global_batch_sequences) {
  plan::SimulationConfig s;
  s.model = training_shape(config, model, global_batch_sequences);
  s.global_batch_sequences = global_batch_sequences;
  s.micro_batch_sequences = config.train.micro_batch_sequences;
  s.micro_batches_per_flush = config.pipeline.micro_batches_per_flush;  // 0: one flush
  s.schedule = config.pipeline.schedule;
  s.dp_scheme = dp_scheme(config.network.dp_exchange);  // what MpiCollectives runs
  s.recompute = false;
  s.overlap_communication = true;
  s.lm_head = true;
  s.tied_head = model.tied_head;
  s.gradient_bucket_mb = config.network.gradient_bucket_mb;
  s.layers_per_stage = config.pipeline.layers_per_stage;  // empty: the even split
  s.flushless = config.pipeline.flushless;
  s.flushless_ahead = config.pipeline.flushless_ahead;
  return s;
}

plan::SearchOptions placement_search_options(const Config& config) {
  plan::SearchOptions search;
  search.seed = config.train.seed;
  search.candidates = config.pipeline.plan_candidates;
  return search;
}

plan::LayoutOptions layout_search_options(const Config& config) {
  plan::LayoutOptions options;
  options.memory.activation_storage = config.device.activation_storage;
  options.placement = placement_search_options(config);
  if (config.pipeline.tensor_parallel > 0) options.tensor_parallel = config.pipeline.tensor_parallel;
  return options;
}

int global_batch_sequences(const Config& config, int ranks) {
  const int units = ranks / fixed_tensor_parallel(config);
  return config.train.micro_batch_sequences * config.train.gradient_accumulation * (units / config.pipeline.stages);
}

}  // namespace geotrain::io
