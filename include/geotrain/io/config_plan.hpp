// The run's settings as the planner and the simulator see them: the one
// mapping from a training config to their inputs, used by `train` (its plan,
// its layout search, its timing file's prediction) and by `plan CONFIG` and
// `simulate CONFIG`, so that they price what `train` runs. Kept apart from
// config.hpp so that the settings tree does not depend on the simulator.
#pragma once
#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "geotrain/plan/search.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/plan/workload.hpp"

namespace geotrain::io {

// Local steps (off when outer.local_steps = 0; the pseudo-gradient's wire is
// compression.gradients).
plan::OuterSync outer_sync(const Config& config);
// The wires of the run's traffic ([compression]; fp32 where unset).
plan::TrafficEncoding traffic_encoding(const Config& config);
// The model and one global batch of `global_batch_sequences`, fp32 values on
// the wire unless [compression] says otherwise, with the run's local steps.
plan::TrainingShape training_shape(const Config& config, const ModelShape& model, int global_batch_sequences);
// One step as `train` runs it: the config's schedule and flushes, sends
// overlapped on copies, the direct exchange (MpiCollectives) in buckets from
// the last backward, no recomputation, the LM head. Device speed is the
// caller's (measured or the scenario's).
plan::SimulationConfig simulation_config(const Config& config, const ModelShape& model, int global_batch_sequences);
// The simulator's scheme for network.dp_exchange (auto: plan::DataParallelScheme::automatic, chosen per group).
plan::DataParallelScheme dp_scheme(DataParallelExchange exchange);
// The placement search as the job runs it (train.seed, pipeline.plan_candidates).
plan::SearchOptions placement_search_options(const Config& config);
// The layout search as the job runs it with pipeline.layout = auto: the
// placement search above, the activations' storage, a fixed tensor-parallel degree.
plan::LayoutOptions layout_search_options(const Config& config);
// micro_batch_sequences x gradient_accumulation x replicas, for `ranks`
// ranks of pipeline.stages stages (and tensor-parallel units where fixed).
int global_batch_sequences(const Config& config, int ranks);

}  // namespace geotrain::io
