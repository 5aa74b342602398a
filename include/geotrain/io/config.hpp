// The run configuration: one flat struct, loaded from a TOML file, then
// `--section.key=value` overrides; unknown keys are fatal, every field has a
// default, a unit in its name where it has one, and a check.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/common/run_choices.hpp"
#include "geotrain/common/wire_bytes.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/plan/placement.hpp"
#include "geotrain/plan/simulator.hpp"

namespace geotrain::io {

struct Config {
  // [model]: the shape file (inputs/models/*.toml) and its overrides
  // (0: the file's value); load_model() applies them.
  std::string model_file = "inputs/models/tiny.toml";  // defaults: relative to the working directory
  int model_layers = 0, model_hidden = 0, model_heads = 0, model_vocabulary = 0, model_sequence_length = 0;
  LmHead model_lm_head = LmHead::model_file;  // model-file | tied | untied
  // [device]
  DeviceRequest device = DeviceRequest::automatic;         // auto | cpu | cuda
  MatmulPrecision matmul_precision = MatmulPrecision::fp32;  // fp32 | bf16
  // fp32 | bf16: each layer's activations kept for the backward at half the
  // bytes (the forward, the weights and the optimizer state stay fp32).
  ActivationStorage activation_storage = ActivationStorage::fp32;
  // [compression]: what the data-parallel gradient exchange puts on the wire
  // (runtime/wire_codec.hpp; lossy formats with error feedback).
  WireFormat gradient_wire = WireFormat::fp32;  // fp32 | int8 | int4 | topk
  // Pipeline messages (runtime/encoded_links.hpp), without error feedback.
  WireFormat activation_wire = WireFormat::fp32;           // fp32 | int8 | int4
  WireFormat activation_gradient_wire = WireFormat::fp32;  // fp32 | int8 | int4
  // The tied embedding's gradient, summed every step between a pipeline's
  // first and last stage (with error feedback).
  WireFormat tied_embedding_wire = WireFormat::fp32;  // fp32 | int8 | int4 | topk
  int compression_group_size = kDefaultWireGroupSize;        // int8 / int4: values per fp32 scale (64)
  double compression_topk_fraction = kDefaultTopkFraction;   // topk: share of the values sent (0.01)
  double device_peak_tflops = 0;           // for MFU; 0: the backend's default
  // [data]
  std::string data_train = "inputs/data/corpus_train.bin";  // paths in a file: relative to the file
  std::string data_validation = "inputs/data/corpus_val.bin";
  // [train]
  int train_steps = 300;
  int micro_batch_sequences = 8;           // B per micro-batch
  int gradient_accumulation = 1;           // micro-batches per step on one rank
  std::uint64_t seed = 1;
  int eval_every_steps = 50;               // 0: only at the end
  int eval_batches = 8;
  int log_every_steps = 1;
  bool quiet = false;
  bool log_json = false;        // stdout: JSON lines only (text to stderr)
  std::string metrics_file = "runs/metrics-{job}.jsonl";  // "" = none; JSON lines, every step; {job} as timing.file
  // A sample of the model's text every sample_every_steps steps (0: never),
  // drawn as `geotrain sample --seed train.seed` draws it.
  int sample_every_steps = 0;
  std::string sample_prompt = "\n";
  int sample_tokens = 64;
  double sample_temperature = 1.0;         // 0: greedy
  // [pipeline]: under mpirun, ranks = stages * data-parallel replicas;
  // train.gradient_accumulation is then the micro-batches per step of each
  // replica (the pipeline's m).
  int pipeline_stages = 1;
  plan::Schedule pipeline_schedule = plan::Schedule::one_f_one_b;  // 1f1b | gpipe
  // Micro-batches per pipeline flush: a step's gradient_accumulation
  // micro-batches in flushes of this many (fewer activations alive with
  // GPipe, a bubble per flush); 0: one flush of all of them.
  int micro_batches_per_flush = 0;
  // No flush between steps (PipeDream-2BW): one unbroken 1F1B stream, each
  // step's gradient computed on the weights one update older than the
  // newest (two versions kept), the step's exchanges finished during the
  // next step. Numerics differ from synchronous training (one-step-stale
  // gradients): analysis/results/flushless.md measures the loss.
  bool pipeline_flushless = false;
  // Flushless: each stage runs this many forwards ahead of its backwards
  // beyond 1F1B's p - 1 - s (as many more activation sets): a round trip
  // over a slow link then finds work waiting. Needs gradient_accumulation
  // >= stages + this.
  int pipeline_flushless_ahead = 0;
  // Tensor parallelism: each pipeline stage's device is a group of this many
  // consecutive ranks of one node, splitting every layer (Megatron-style);
  // ranks = tensor_parallel x stages x replicas. Must divide model.heads.
  // With pipeline.layout = auto: the degree the search must use; 0: the
  // search chooses it (units of ranks of one host).
  int tensor_parallel = 1;
  std::vector<int> layers_per_stage;       // empty: an even split
  // auto: the layout search picks the layout (the global batch stays
  // micro_batch_sequences x gradient_accumulation x ranks / stages).
  LayoutChoice layout = LayoutChoice::fixed;
  // A plan to train exactly: what `geotrain plan ... --json` printed
  // (its stages and placement; its layers, micro-batches and flush where
  // it has them). "" = none; relative to the file that sets it.
  std::string plan_file;
  plan::Placement placement = plan::Placement::planned;  // planned | rank-order | dtfm-rank-order | random
  int plan_candidates = 2000;              // the planner's search effort (per island)
  // [network]
  std::string network_matrix;              // scenario file to plan on instead of probing; "" = probe
  double network_deadline_s = 120;         // longest any rank waits for a peer before aborting the job
  int probe_bytes = 1 << 20;               // bandwidth message size of the start-up probe
  // Data-parallel gradient sums start in buckets of this many MiB during the
  // step's last backward (PyTorch DDP's default: 25); 0: one sum after it.
  double gradient_bucket_mb = 25;
  // [checkpoint]
  std::string checkpoint_dir;              // "" = no checkpoints; relative to the working directory
  int checkpoint_every_steps = 0;          // 0: only at the end (and on SIGTERM)
  int checkpoint_keep = 3;                 // newest files kept
  std::string checkpoint_resume;           // "" | auto (the dir's latest, if any) | a checkpoint file
  // A checkpoint whose weights start the run (fresh optimizer, step 0, data
  // from the start): fine-tuning a converted model. With resume = auto a
  // checkpoint already in checkpoint.dir wins (a requeued fine-tuning job).
  std::string checkpoint_init_from;
  // Written by a background thread while training goes on (false: training
  // waits for each write, as before).
  bool checkpoint_asynchronous = true;
  // On the CPU an asynchronous write reads the live parameters and moments
  // (no copy: the next optimizer step waits for the write). true: copy them
  // to host memory first, so that only the copy holds training up, at 12
  // bytes per parameter of the writing rank's stage (GPUs always copy).
  bool checkpoint_snapshot = false;
  // Under mpirun, the longest the training thread waits for a write in
  // flight (the writers' reads, then the whole write) before every rank
  // stops (exit 1) naming the file: a stuck file system or a writer thread
  // left inside a collective write. Far above a healthy write's time.
  double checkpoint_deadline_s = 3600;
  // README "Checkpoints": single, sharded, parallel, per_site, or auto
  // (runtime/checkpointing.hpp's resolve_checkpoint_form).
  CheckpointForm checkpoint_form = CheckpointForm::automatic;
  Transport transport = Transport::automatic;  // auto (NCCL on GPUs where built, else MPI) | mpi | nccl
  // [timing]: the run's HDF5 timing file (io/timing_file.hpp)
  std::string timing_file = "runs/timing-{job}.h5";  // "" = none; {job}: Slurm job id or start time; relative to the working directory
  int timing_max_event_steps = 1000;       // steps whose events are kept (the first ones); per-step records always
  // [outer]: local steps (DiLoCo): each replica takes local_steps inner
  // optimizer steps on its own data, then the replicas average their
  // pseudo-gradients (parameters at the last synchronisation minus now; on
  // the wire as compression.gradients says) and take one Nesterov step.
  // 0: synchronous data parallelism (the gradient summed every step).
  int outer_local_steps = 0;
  // DiLoCo's outer step. Its momentum 0.9 lags in short runs (5% worse than
  // 0.5 at 100 steps, H = 10) and wins in long ones: at 1000 steps, H = 20,
  // 2 replicas 2.1% below synchronous training (0.5: 1.9% above), 8
  // replicas 13% above (0.5: 24%) (analysis/results/low_communication.md).
  double outer_learning_rate = 0.7;
  double outer_momentum = 0.9;
  // Streaming: a stage's parameters in this many fragments, synchronised at
  // steps staggered by local_steps / fragments, each exchange overlapping
  // the inner steps until the next starts, the replica's own progress
  // meanwhile kept (1: the whole stage at once, not overlapped).
  int outer_fragments = 1;
  // Hierarchical: replicas in one site (the network's site names: a
  // scenario's [sites], or probed host names) still sum their gradients
  // every step over their fast links; only the sites take local steps.
  bool outer_sync_within_site = false;
  // Post-local SGD: the first synchronous_steps steps sum every replica's
  // gradients every step, as without local steps; local steps start from
  // the parameters they reach. From scratch a short synchronous start is
  // what lets many replicas keep their loss: 2 stages x 4 replicas, H = 20,
  // 1000 steps, 100 synchronous first: 2.4% below synchronous training
  // (the whole stage at int8), against 3.4% above from the first step; 0.5%
  // above streamed at int4, against 7.0% (analysis/results/busy_devices.md).
  int outer_synchronous_steps = 0;
  // [emulation]: for experiments on one machine only, never for real runs.
  // compute_slowdown[r]: rank r's forward and backward (and its device
  // probe) take this many times as long, the extra spent asleep, so that
  // identical CPUs act as mixed devices. Empty: none; else one per rank.
  std::vector<double> compute_slowdown;
  // [optimizer]
  InnerOptimizer optimizer_kind = InnerOptimizer::adamw;  // adamw | sgd
  double learning_rate = 1e-3;
  double min_learning_rate_fraction = 0.1;
  int warmup_steps = 20;
  int decay_steps = 0;                     // length of the cosine schedule; 0: train.steps
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.1;
  double gradient_clip = 1.0;

  std::string source;                        // the file it came from, for messages
  std::vector<std::string> command_line_keys;  // keys set by overrides, for messages

  // Where `key`'s value came from: "command line" or the config file.
  std::string origin_of(const std::string& key) const;
};

// Reads `path` (paths inside are relative to the file's folder), then applies
// `overrides` ("section.key=value", as given after --). Throws InputError
// naming the file or "command line" and the key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Defaults only (no file), then overrides.
Config default_config(const std::vector<std::string>& overrides = {});
// load_config of `path`, or default_config where `path` is "" (a command
// run without a config file).
Config read_config(const std::string& path, const std::vector<std::string>& overrides);
// The model file with the config's model.* overrides applied and checked
// (errors name the override's origin and key).
ModelFile load_model(const Config& config);
// Local steps as the planner and the simulator see them (off when
// outer.local_steps = 0; the pseudo-gradient's wire is compression.gradients).
plan::OuterSync outer_sync(const Config& config);
// Every key with its value, "section.key = value" lines (for logs and checkpoints).
std::string describe(const Config& config);

}  // namespace geotrain::io
