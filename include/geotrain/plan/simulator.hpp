// Iteration-time model: how long one training iteration of a plan takes on a
// network, from FLOPs, a device speed and the alpha-beta links of the
// planner's cost model. Pure C++ (standard library only), deterministic.
//
// The pipeline phase is an explicit list-scheduling simulation: every device
// runs the program of its stage (pipeline_schedule.hpp: GPipe or 1F1B, the
// same program the runtime executes), each step starts when its inputs
// have arrived and its device (and, for a send, its link) is free. Fill,
// drain and the overlap of communication with compute come out of that
// simulation; nothing is a closed formula. The data-parallel gradient
// exchange of each stage group starts when the group's last backward ends.
// Model, units and assumptions: src/plan/README.md, "Simulator".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "geotrain/common/enum_names.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/workload.hpp"

namespace geotrain::plan {

class ExchangeCostCache;  // exchange_cost.hpp

enum class DataParallelScheme {
  paper,    // the paper's DATAP (§2.2): each member swaps a 1/D shard with every other member
  ring,     // ring all-reduce: 2(D-1) steps of c/D, each limited by the slowest ring link
  central,  // reduce to the group's first member, then broadcast, pipelined along the ring
  direct,   // geotrain's MPI exchange: 2 members swap whole buffers at once; more reduce-scatter
            // then all-gather 1/D shards straight between every pair, all pairs at once
  hierarchical,  // sum inside each site, across sites (striped over all members when the sites are
                 // of one size, between site leaders otherwise), then spread inside each site
                 // (exchange_pattern.hpp; the runtime's job/hierarchical_exchange.hpp)
  automatic,     // per group, direct or hierarchical: whichever datap_exchange_s predicts faster for
                 // the group's whole gradient (the runtime's network.dp_exchange = auto)
};

// Which FLOP count turns an iteration time into reported PFLOPS (the count,
// not what runs: the compute model always executes the layers it simulates).
enum class FlopsFormula {
  paper,     // 96 B s l h^2 (1 + s/(6h)): the reading of the paper's figure, no vocabulary term
  megatron,  // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)): Megatron-LM's estimate with recomputation
  executed,  // what the simulator executes: layer passes (3 or 4 with recomputation) + the head if on
};

// V100 fp16 tensor-core peak, and the one calibrated constant of the model:
// achieved/peak such that DT-FM with its scheduler on the on-demand data
// centre (24 layers, batch 1024) gives the paper's 2.331 PFLOPS (see
// analysis/results/paper_tables.md; bench_paper_tables re-derives it).
constexpr double kV100PeakTflops = 125.0;
constexpr double kCalibratedEfficiency = 0.34;

struct SimulationConfig {
  TrainingShape model;               // layers, hidden, sequence, vocabulary, activation/gradient bytes
  int global_batch_sequences = 1024; // sequences per iteration, all replicas
  int micro_batch_sequences = 1;
  int micro_batches_per_flush = 64;  // pipeline flush size (the paper's runs: 64); 0 = one flush
  double peak_tflops = kV100PeakTflops;
  double efficiency = kCalibratedEfficiency;
  Schedule schedule = Schedule::gpipe;
  bool flushless = false;            // PipelineWork::flushless (1F1B, one flush)
  int flushless_ahead = 0;
  DataParallelScheme dp_scheme = DataParallelScheme::paper;
  bool recompute = true;             // activation checkpointing: backward = 2x forward + 1x forward again
  // true (DT-FM): sends on their own stream, receives posted ahead, compute
  // never waits for a send. false (Megatron-LM): blocking p2p, each run of
  // consecutive sends/receives is one batch posted together; a message
  // starts when both ends have posted it; the device waits for the batch.
  bool overlap_communication = true;
  bool lm_head = false;              // logits (2 s h V per sequence) on the last stage
  // With lm_head: the head is the token embedding wte (V x h, GPT-2's tied
  // head). With D_pp > 1 the last stage holds a copy of wte and, once per
  // iteration, the first and last stage of each replica swap its gradient
  // (runtime/gradient_sync.cpp). false: the last stage holds its own V x h
  // head, nothing is swapped.
  bool tied_head = true;
  FlopsFormula flops_formula = FlopsFormula::paper;
  // Layers of each pipeline stage, in pipeline order; empty: the even split
  // (the first L mod D_pp stages one more).
  std::vector<int> layers_per_stage;
  // Per device of the network (by id): its TFLOPS in place of peak_tflops
  // (mixed devices; Network::device_tflops); empty: every device peak_tflops.
  std::vector<double> device_tflops;
  // > 0: each stage's data-parallel sum starts in buckets of this many MiB
  // of fp32 gradient (geotrain's network.gradient_bucket_mb) while its last
  // backward produces the layers' gradient; 0: after the backward (the paper).
  double gradient_bucket_mb = 0;
  // Tensor parallelism (Megatron-style, inside a node; tensor_parallel.hpp):
  // t > 1: each device of the network is a unit of t GPUs of one node and
  // device_tflops is the unit's combined speed. Every layer all-reduces its
  // b*s*h activations twice in the forward and twice in the backward (twice
  // more with recomputation), over the unit's ring: per device (unit) of the
  // network, its slowest hop's latency and bandwidth (empty: free). Each rank
  // exchanges its 1/t share of the stage's gradient with its counterparts.
  int tensor_parallel = 1;
  std::vector<double> tensor_latency_s;
  std::vector<double> tensor_bandwidth_bytes_per_s;
  // Set by a search that prices the same groups again and again: their
  // exchanges' costs, built once per group (null: priced on every call).
  std::shared_ptr<ExchangeCostCache> exchange_costs;
};

// What one replica's pipeline does per iteration, in seconds and bytes: the
// input of the simulation proper. `pipeline_work` derives it from a config;
// tests build it by hand.
struct PipelineWork {
  int micro_batches_per_flush = 1;      // m
  int flushes = 1;                      // gradient-accumulation steps, each a full fill and drain
  std::vector<double> forward_s;        // per stage, one micro-batch
  std::vector<double> backward_s;       // per stage, one micro-batch (recomputation included)
  double activation_bytes = 0;          // per micro-batch, forward
  std::optional<double> activation_gradient_bytes;  // per micro-batch, back; unset: activation_bytes
  std::vector<double> gradient_bytes;   // per stage: c_DP of that stage's parameters
  // Per replica, swapped between its first and last stage once per
  // iteration (the tied embedding's gradient); 0: nothing to swap.
  double tied_embedding_bytes = 0;
  // Overlap of the data-parallel sum with the last backward: the bucket size
  // on the wire (0: none) and, per stage, the part of gradient_bytes the
  // layers produce during that backward (the rest, embeddings and head, is
  // ready only at its end).
  double bucket_bytes = 0;
  std::vector<double> layer_gradient_bytes;
  Schedule schedule = Schedule::gpipe;
  DataParallelScheme dp_scheme = DataParallelScheme::paper;
  // Per stage, the scheme its group sums by where the runtime chose one
  // (overrides dp_scheme); empty: group_scheme of dp_scheme.
  std::vector<DataParallelScheme> stage_dp_scheme;
  bool overlap_communication = true;
  // Per device of the network (by id): multiplies forward_s and backward_s
  // on that device (reference rate / the device's rate); empty: 1 everywhere.
  std::vector<double> device_time_scale;
  // Tensor parallelism: per stage, the all-reduces of one micro-batch over
  // a unit's ring (count, and their bytes added up), forward and backward;
  // per device (unit), its ring's slowest hop. A compute step takes its
  // FLOP time plus, for t members, 2(t-1) (count x alpha + bytes / (t beta))
  // (ring all-reduce). Empty: no tensor parallelism.
  int tensor_parallel = 1;
  std::vector<double> tensor_forward_allreduces, tensor_forward_bytes;
  std::vector<double> tensor_backward_allreduces, tensor_backward_bytes;
  std::vector<double> tensor_latency_s, tensor_bandwidth_bytes_per_s;
  // Local steps (TrainingShape::outer): gradient_bytes are then each
  // stage's pseudo-gradient on the wire, exchanged every local_steps steps
  // instead of every step (src/plan/README.md, "Local steps").
  OuterSync outer;
  // outer.within_site: per stage, the fp32 gradient the replicas of one site
  // sum every step (in buckets as bucket_bytes says, over layer_gradient_bytes).
  std::vector<double> site_gradient_bytes;
  // pipeline.flushless (PipeDream-2BW; needs 1F1B): no flush between steps.
  // A step is the steady-state advance of the unbroken stream (timed over
  // kFlushlessSteps steps against half as many); the data-parallel sum
  // still follows each step's last backward, the tied embedding's swap runs
  // during the next step (it only has to fit in one).
  bool flushless = false;
  int flushless_ahead = 0;  // pipeline.flushless_ahead
  std::shared_ptr<ExchangeCostCache> exchange_costs;  // SimulationConfig::exchange_costs
};
inline constexpr int kFlushlessSteps = 4;

// Per-micro-batch compute of one stage from FLOPs: layers as
// config.layers_per_stage says, or split as evenly as possible (the first L
// mod D_pp stages get one more), embeddings on stage 0, the head (if any) on
// the last stage; at peak_tflops, scaled per device by device_time_scale.
PipelineWork pipeline_work(const SimulationConfig& config, int pipeline_stages, int data_parallel);

// FLOPs of one transformer layer's forward pass over `sequences` sequences:
// 24 b s h^2 (1 + s/(6h)) (matrix multiplications only, as Megatron-LM counts).
double layer_forward_flops(const ModelShape& model, double sequences);
// Reported FLOPs of one iteration under `formula` (B = global batch in sequences).
double iteration_flops(const SimulationConfig& config, FlopsFormula formula);
// Parameters held by stage `stage` of `pipeline_stages` (layers as pipeline_work splits them),
// without an LM head (pipeline_work adds V x h to the last stage where it holds one).
double stage_parameters(const ModelShape& model, int stage, int pipeline_stages);
// The same for a stage of `layers` layers that is first and/or last.
double stage_parameters(const ModelShape& model, int layers, bool first, bool last);
// Parameters one rank of a tensor-parallel group of t holds for such a stage
// (Megatron's split): per layer the weight matrices and the column-parallel
// biases (QKV, fc) 1/t, the row-parallel biases (attention and MLP output)
// and both layer norms whole: 12h^2/t + 7h/t + 6h; the token embedding
// vocabulary-parallel, ceil(V/t) rows; the position embedding and the final
// norm whole. t = 1: stage_parameters. No LM head (as stage_parameters).
double stage_parameters_per_rank(const ModelShape& model, int layers, bool first, bool last, int tensor_parallel);
// Seconds of the all-reduces a compute step of stage s on `device` adds (tensor parallelism; 0 without).
double tensor_allreduce_s(const PipelineWork& work, int stage, int device, bool backward);
// Layers of each stage: `layers_per_stage` checked (D_pp counts >= 0 adding up
// to the model's layers; InputError otherwise), or the even split.
std::vector<int> stage_layers(const ModelShape& model, int pipeline_stages, const std::vector<int>& layers_per_stage);

// A timed step, for timelines (SimulationResult::trace).
struct TraceEvent {
  int replica, stage;
  Step step;
  double start_s, end_s;  // compute: on the device; send: link busy start -> arrival
};

struct SimulationResult {
  double iteration_s = 0;       // start to the end of the last gradient exchange
  double pipeline_phase_s = 0;  // start to the end of the last backward (slowest replica)
  double compute_s = 0;         // busiest device: forward + backward time per iteration
  double pipeline_comm_s = 0;   // busiest device: time its links are busy sending (bytes/beta each) per iteration
  double datap_comm_s = 0;      // slowest stage group's gradient exchange
  double bubble_fraction = 0;   // 1 - (all devices' compute) / (devices * pipeline_phase_s)
  // Compute utilisation: a device's forward + backward time / iteration_s,
  // the mean and the least over all devices.
  double utilisation_mean = 0, utilisation_min = 0;
  double tied_exchange_s = 0;   // slowest replica's tied-embedding transfer (slower direction); 0: none
  // Local steps: iteration_s is the step time averaged over H steps, and
  // datap_comm_s the slowest group's exchange / H. local_step_s: a step
  // without data-parallel traffic; outer_exposed_s: what the steps wait for
  // the syncs, per step (iteration_s - local_step_s).
  double local_step_s = 0, outer_exposed_s = 0;
  // Bytes sent between devices of different sites per step (data parallel:
  // amortised over local steps); all 0 where the network has no sites.
  double cross_site_pipeline_bytes = 0, cross_site_datap_bytes = 0, cross_site_tied_bytes = 0;
  double cross_site_bytes() const { return cross_site_pipeline_bytes + cross_site_datap_bytes + cross_site_tied_bytes; }
  std::vector<double> stage_datap_s;         // exchange time of each stage group (local steps: one sync, whole stage)
  std::vector<DataParallelScheme> stage_dp_scheme;  // the scheme each stage group sums by (auto: its choice)
  std::vector<double> stage_last_backward_s; // when each group's last backward ends
  int micro_batches = 0;        // per replica per iteration
  int micro_batches_per_flush = 0;
  int flushes = 0;
  // Filled by simulate(network, plan, config) only:
  double flops_per_iteration = 0;  // under config.flops_formula
  double pflops = 0;
  double tokens_per_s = 0;
  std::vector<TraceEvent> trace;   // only with record_trace
};

// Simulates one iteration of `plan` on `network`. Every replica's pipeline
// runs on its own devices and links (links between distinct pairs are
// independent, a device sends and receives at the same time); throws
// InputError on inconsistent shapes. The tied embedding: each
// end of a replica sends its gradient of wte to the other once its stage
// group's data-parallel exchange is done; the iteration ends no earlier
// than both arrive.
SimulationResult simulate(const Network& network, const Plan& plan, const PipelineWork& work,
                          bool record_trace = false);
SimulationResult simulate(const Network& network, const Plan& plan, const SimulationConfig& config,
                          bool record_trace = false);

// Gradient-exchange time of one group (members in replica order) for
// `bytes` of gradient per member. On a network with shared links
// (Network::shared) the scheme's transfers share them (exchange_pattern.hpp,
// flow_sharing.hpp); without, each runs at its pair's full rate. `paper` is
// always the DT-FM cost model's DATAP.
double datap_exchange_s(const Network& network, const std::vector<int>& members, double bytes,
                        DataParallelScheme scheme, ExchangeCostCache* costs = nullptr);
// The scheme a group sums by: `scheme` itself, or under `automatic`
// hierarchical where datap_exchange_s predicts it faster than direct for
// `bytes` (the group's whole gradient), else direct.
DataParallelScheme group_scheme(const Network& network, const std::vector<int>& members, double bytes,
                                DataParallelScheme scheme, ExchangeCostCache* costs = nullptr);
// The same less its latencies: what one bucket adds behind the one before on
// the same links (a bucketed sum pays the latencies once, after its last).
double datap_bytes_s(const Network& network, const std::vector<int>& members, double bytes, DataParallelScheme scheme);

// Names as the command line and reports spell them.
inline constexpr EnumName<DataParallelScheme> kDataParallelSchemeNames[] = {
    {DataParallelScheme::paper, "paper"}, {DataParallelScheme::ring, "ring"},
    {DataParallelScheme::central, "central"}, {DataParallelScheme::direct, "direct"},
    {DataParallelScheme::hierarchical, "hierarchical"}, {DataParallelScheme::automatic, "auto"}};
inline constexpr EnumName<FlopsFormula> kFlopsFormulaNames[] = {
    {FlopsFormula::paper, "paper"}, {FlopsFormula::megatron, "megatron"}, {FlopsFormula::executed, "executed"}};

inline std::string to_string(DataParallelScheme scheme) { return name_in(kDataParallelSchemeNames, scheme); }
// One scheme per stage as reports print them: "hierarchical direct".
inline std::string to_string(const std::vector<DataParallelScheme>& schemes) {
  std::string text;
  for (DataParallelScheme scheme : schemes) text += (text.empty() ? "" : " ") + to_string(scheme);
  return text;
}
inline std::string to_string(FlopsFormula formula) { return name_in(kFlopsFormulaNames, formula); }
inline bool parse_dp_scheme(const std::string& text, DataParallelScheme* out) {
  return parse_name_in(kDataParallelSchemeNames, text, out);
}
inline bool parse_flops_formula(const std::string& text, FlopsFormula* out) {
  return parse_name_in(kFlopsFormulaNames, text, out);
}

}  // namespace geotrain::plan
