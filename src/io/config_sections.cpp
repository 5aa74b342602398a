// Each section of the settings tree: its keys with their doc strings, and
// the checks that need that section alone. The rules between sections live
// in config_rules.cpp.
#include <string>

#include "config_fields.hpp"
#include "geotrain/io/model_file.hpp"

namespace geotrain::io::config_table {
namespace {

Section model_section(ModelSettings& m) {
  return {"model", "The model's shape: a model file and its overrides (0: the file's value).",
          {{"model.file", &m.file, "The shape file (inputs/models/*.toml); relative to the config file.", true},
           {"model.layers", &m.layers, "Transformer blocks; 0: the model file's."},
           {"model.hidden", &m.hidden, "Width of the residual stream; 0: the model file's."},
           {"model.heads", &m.heads, "Attention heads (must divide model.hidden); 0: the model file's."},
           {"model.vocabulary", &m.vocabulary, "Token ids the embedding holds; 0: the model file's."},
           {"model.sequence_length", &m.sequence_length, "Tokens per sequence; 0: the model file's."},
           {"model.lm_head", &m.lm_head,
            "The LM head: model-file (as the model file says), tied (the token embedding, as GPT-2; with 2+ stages its "
            "gradient crosses from the last stage to the first every step) or untied (the last stage's own matrix)."}}};
}

void check_model(const ModelSettings& m, const Checks& checks) {
  for (const auto& [key, size] : {std::pair{"model.layers", m.layers}, std::pair{"model.hidden", m.hidden},
                                  std::pair{"model.heads", m.heads}, std::pair{"model.vocabulary", m.vocabulary},
                                  std::pair{"model.sequence_length", m.sequence_length}}) {
    if (size < 0 || size > kMaxModelDimension) {
      checks.fail(key, "must be in [1, " + std::to_string(kMaxModelDimension) + "], got " + std::to_string(size));
    }
  }
}

Section device_section(DeviceSettings& d) {
  return {"device", "Where the kernels run and at what precision.",
          {{"device.kind", &d.kind, "auto (CUDA where a GPU is usable, else the CPU), cpu or cuda (an error without a GPU)."},
           {"device.matmul_precision", &d.matmul_precision,
            "fp32 or bf16: the GEMM operands' precision (master weights, optimizer state, layernorm and softmax "
            "statistics stay fp32; on the CPU bf16 is emulated by rounding, for parity tests)."},
           {"device.activation_storage", &d.activation_storage,
            "fp32 or bf16: each layer's activations kept for the backward at half the bytes (the forward, the "
            "weights and the optimizer state stay fp32)."},
           {"device.peak_tflops", &d.peak_tflops, "The device's peak, for MFU in the progress line; 0: the backend's default."}}};
}

void check_device(const DeviceSettings& d, const Checks& checks) { checks.in_range("device.peak_tflops", d.peak_tflops, 0, 1e6); }

Section compression_section(CompressionSettings& c) {
  return {"compression", "What crosses slow links, and how it is encoded (lossy formats keep error feedback where noted).",
          {{"compression.gradients", &c.gradients,
            "fp32, int8, int4 or topk: the data-parallel gradient sum's wire (with error feedback); with local steps "
            "also the pseudo-gradient's."},
           {"compression.activations", &c.activations, "fp32, int8 or int4: pipeline activations (no error feedback)."},
           {"compression.activation_gradients", &c.activation_gradients,
            "fp32, int8 or int4: pipeline activation gradients (no error feedback)."},
           {"compression.tied_embedding", &c.tied_embedding,
            "fp32, int8, int4 or topk: the tied embedding's gradient, summed every step between a pipeline's first "
            "and last stage (with error feedback)."},
           {"compression.group_size", &c.group_size, "int8 / int4: values per fp32 scale."},
           {"compression.topk_fraction", &c.topk_fraction, "topk: the share of the values sent."}}};
}

void check_compression(const CompressionSettings& c, const Checks& checks) {
  if (c.group_size < 2 || c.group_size > 65536) {
    checks.fail("compression.group_size", "must be in [2, 65536], got " + std::to_string(c.group_size));
  }
  if (!(c.topk_fraction > 0) || c.topk_fraction > 1) {
    checks.fail("compression.topk_fraction", "must be in (0, 1], got " + std::to_string(c.topk_fraction));
  }
  for (const auto& [key, format] : {std::pair{"compression.activations", c.activations},
                                    std::pair{"compression.activation_gradients", c.activation_gradients}}) {
    if (format == WireFormat::topk) checks.fail(key, "must be fp32, int8 or int4 (top-k needs error feedback)");
  }
}

Section data_section(DataSettings& d) {
  return {"data", "Token shards (tools/prepare_data.py writes them).",
          {{"data.train", &d.train, "The training shard; relative to the config file.", true},
           {"data.validation", &d.validation, "The validation shard; relative to the config file.", true}}};
}

Section train_section(TrainSettings& t) {
  return {"train", "The training loop: steps, batch, evaluation, logging and samples.",
          {{"train.steps", &t.steps, "Optimizer steps of the run."},
           {"train.micro_batch_sequences", &t.micro_batch_sequences, "Sequences per micro-batch (B)."},
           {"train.gradient_accumulation", &t.gradient_accumulation,
            "Micro-batches per step on one rank; under a pipeline, each replica's micro-batches per step (m)."},
           {"train.seed", &t.seed, "Seeds the weights, the data order and samples."},
           {"train.eval_every_steps", &t.eval_every_steps, "Validation every this many steps; 0: only at the end."},
           {"train.eval_batches", &t.eval_batches, "Validation batches per evaluation."},
           {"train.log_every_steps", &t.log_every_steps, "A progress line every this many steps."},
           {"train.quiet", &t.quiet, "No progress lines."},
           {"train.log_json", &t.log_json, "stdout: JSON lines only (text goes to stderr)."},
           {"train.metrics_file", &t.metrics_file,
            "JSON lines, one per step; {job} as in timing.file; \"\": none."},
           {"train.sample_every_steps", &t.sample_every_steps,
            "A sample of the model's text every this many steps, drawn as `geotrain sample --seed train.seed` "
            "draws it; 0: never."},
           {"train.sample_prompt", &t.sample_prompt, "The samples' prompt."},
           {"train.sample_tokens", &t.sample_tokens, "Tokens per sample."},
           {"train.sample_temperature", &t.sample_temperature, "The samples' temperature; 0: greedy."}}};
}

void check_train(const TrainSettings& t, const Checks& checks) {
  checks.positive("train.steps", t.steps);
  checks.positive("train.micro_batch_sequences", t.micro_batch_sequences);
  checks.positive("train.gradient_accumulation", t.gradient_accumulation);
  checks.positive("train.eval_batches", t.eval_batches);
  checks.positive("train.log_every_steps", t.log_every_steps);
  checks.positive("train.sample_tokens", t.sample_tokens);
  if (t.gradient_accumulation > 16000) {
    checks.fail("train.gradient_accumulation", "must be <= 16000 (message tags), got " + std::to_string(t.gradient_accumulation));
  }
  checks.in_range("train.sample_temperature", t.sample_temperature, 0, 1e6);
}

Section pipeline_section(PipelineSettings& p) {
  return {"pipeline", "The layout: stages, schedule, tensor parallelism and placement. Under mpirun, ranks = "
                      "tensor_parallel x stages x data-parallel replicas.",
          {{"pipeline.stages", &p.stages, "Pipeline stages."},
           {"pipeline.schedule", &p.schedule, "1f1b or gpipe."},
           {"pipeline.layers_per_stage", &p.layers_per_stage, "Blocks of each stage, one entry per stage; []: an even split."},
           {"pipeline.micro_batches_per_flush", &p.micro_batches_per_flush,
            "A step's micro-batches in flushes of this many (fewer activations alive with GPipe, a bubble per flush); "
            "0: one flush of all of them."},
           {"pipeline.flushless", &p.flushless,
            "No flush between steps (PipeDream-2BW): one unbroken 1F1B stream, each step's gradient computed on "
            "weights one update older than the newest; numerics differ from synchronous training."},
           {"pipeline.flushless_ahead", &p.flushless_ahead,
            "Flushless: forwards each stage runs ahead of its backwards beyond 1F1B's p - 1 - s, so that a round trip "
            "over a slow link finds work waiting."},
           {"pipeline.tensor_parallel", &p.tensor_parallel,
            "Ranks of one node that split every layer of a stage (Megatron-style); must divide model.heads. With "
            "layout = auto: the degree the search must use; 0: the search chooses it."},
           {"pipeline.layout", &p.layout,
            "fixed (stages, layers_per_stage and the train.* batch as given, every rank used) or auto (rank 0's "
            "layout search chooses stages, replicas, micro-batches, the layer split and which ranks train)."},
           {"pipeline.plan_file", &p.plan_file,
            "A plan to train exactly, as `geotrain plan --json` printed it; relative to the config file; \"\": none.", true},
           {"pipeline.placement", &p.placement, "planned, rank-order, dtfm-rank-order or random: which device holds which stage."},
           {"pipeline.plan_candidates", &p.plan_candidates, "The planner's search effort (candidates per island)."}}};
}

void check_pipeline(const PipelineSettings& p, const Checks& checks) {
  checks.positive("pipeline.stages", p.stages);
  checks.positive("pipeline.plan_candidates", p.plan_candidates);
  if (p.tensor_parallel < 0 || (p.tensor_parallel == 0 && p.layout != LayoutChoice::automatic)) {
    checks.fail("pipeline.tensor_parallel", "must be >= 1 (0: chosen by the layout search, with pipeline.layout = "
                "auto), got " + std::to_string(p.tensor_parallel));
  }
  if (!p.layers_per_stage.empty() && static_cast<int>(p.layers_per_stage.size()) != p.stages) {
    checks.fail("pipeline.layers_per_stage", "has " + std::to_string(p.layers_per_stage.size()) +
                " entries but pipeline.stages is " + std::to_string(p.stages));
  }
  if (!p.plan_file.empty() && (p.layout == LayoutChoice::automatic || !p.layers_per_stage.empty())) {
    checks.fail("pipeline.plan_file", std::string("cannot be combined with ") +
                (p.layout == LayoutChoice::automatic ? "pipeline.layout = auto" : "pipeline.layers_per_stage") +
                " (the plan file fixes the layout)");
  }
  if (p.layout == LayoutChoice::automatic && !p.layers_per_stage.empty()) {
    checks.fail("pipeline.layers_per_stage", "cannot be combined with pipeline.layout = auto (the search splits the layers)");
  }
  if (p.flushless) {
    if (p.schedule != plan::Schedule::one_f_one_b) checks.fail("pipeline.flushless", "needs pipeline.schedule = \"1f1b\"");
    if (p.flushless_ahead < 0) checks.fail("pipeline.flushless_ahead", "must be >= 0");
    if (p.tensor_parallel != 1) checks.fail("pipeline.flushless", "needs pipeline.tensor_parallel = 1");
  } else if (p.flushless_ahead != 0) {
    checks.fail("pipeline.flushless_ahead", "needs pipeline.flushless = true");
  }
}

Section network_section(NetworkSettings& n) {
  return {"network", "The network: probed or read from a file, the deadline every wait has, and the transports.",
          {{"network.matrix", &n.matrix,
            "A scenario file to plan on instead of probing (e.g. under emulation); relative to the config file; "
            "\"\": probe.", true},
           {"network.deadline_s", &n.deadline_s, "The longest any rank waits for a peer before the job stops."},
           {"network.probe_bytes", &n.probe_bytes, "The start-up probe's bandwidth message size."},
           {"network.gradient_bucket_mb", &n.gradient_bucket_mb,
            "Data-parallel gradient sums start in buckets of this many MiB during the step's last backward; 0: one "
            "sum after it."},
           {"network.transport", &n.transport, "auto (NCCL on GPUs where built, else MPI), mpi or nccl."}}};
}

void check_network(const NetworkSettings& n, const Checks& checks) {
  checks.positive("network.probe_bytes", n.probe_bytes);
  checks.in_range("network.deadline_s", n.deadline_s, 0.01, 1e7);
  checks.in_range("network.gradient_bucket_mb", n.gradient_bucket_mb, 0, 1e6);
}

Section checkpoint_section(CheckpointSettings& c) {
  return {"checkpoint", "HDF5 checkpoints: where, how often, how they are written, and what a run starts from.",
          {{"checkpoint.dir", &c.dir, "Where checkpoints go; relative to the working directory; \"\": none."},
           {"checkpoint.every_steps", &c.every_steps, "A checkpoint every this many steps; 0: only at the end (and on SIGTERM)."},
           {"checkpoint.keep", &c.keep, "The newest checkpoints kept."},
           {"checkpoint.resume", &c.resume, "\"\", auto (checkpoint.dir's latest, if any) or a checkpoint to continue."},
           {"checkpoint.init_from", &c.init_from,
            "A checkpoint whose weights start the run (fresh optimizer, step 0, data from the start): fine-tuning. "
            "With resume = auto a checkpoint already in checkpoint.dir wins."},
           {"checkpoint.asynchronous", &c.asynchronous, "Written by a background thread while training goes on."},
           {"checkpoint.deadline_s", &c.deadline_s,
            "Under mpirun, the longest the training thread waits for a write in flight before every rank stops."},
           {"checkpoint.snapshot", &c.snapshot,
            "On the CPU: copy parameters and moments before an asynchronous write (12 bytes per parameter), so that "
            "only the copy holds training up; false: the next optimizer step waits for the write."},
           {"checkpoint.form", &c.form, "auto, single, sharded, parallel or per_site (docs/checkpoints.md)."}}};
}

void check_checkpoint(const CheckpointSettings& c, const Checks& checks) {
  checks.positive("checkpoint.keep", c.keep);
  checks.in_range("checkpoint.deadline_s", c.deadline_s, 0.01, 1e7);
  if (c.resume == "auto" && c.dir.empty()) {
    checks.fail("checkpoint.resume", "auto needs checkpoint.dir (where to look for the latest checkpoint)");
  }
  if (!c.init_from.empty() && !c.resume.empty() && c.resume != "auto") {
    checks.fail("checkpoint.init_from", "cannot be combined with checkpoint.resume = \"" + c.resume +
                "\" (init_from starts a new run from weights; resume continues one)");
  }
}

Section timing_section(TimingSettings& t) {
  return {"timing", "The run's HDF5 timing file (analysis/ reads it).",
          {{"timing.file", &t.file,
            "The timing file; {job}: the Slurm job id or the start time; relative to the working directory; \"\": none."},
           {"timing.max_event_steps", &t.max_event_steps, "Steps whose events are kept (the first ones); per-step records always."}}};
}

Section outer_section(OuterSettings& o) {
  return {"outer", "Local steps (DiLoCo): replicas step on their own data and synchronise every local_steps steps.",
          {{"outer.local_steps", &o.local_steps,
            "Inner optimizer steps between outer synchronisations (H); 0: synchronous data parallelism."},
           {"outer.learning_rate", &o.learning_rate, "The outer Nesterov step's learning rate."},
           {"outer.momentum", &o.momentum, "The outer Nesterov step's momentum."},
           {"outer.fragments", &o.fragments,
            "Streaming: a stage's parameters in this many fragments, synchronised at staggered steps, each exchange "
            "overlapping the inner steps; 1: the whole stage at once."},
           {"outer.sync_within_site", &o.sync_within_site,
            "Replicas in one site sum their gradients every step; only the sites take local steps."},
           {"outer.synchronous_steps", &o.synchronous_steps,
            "Post-local SGD: the first this many steps synchronous, then local steps from the parameters they reach."}}};
}

void check_outer(const OuterSettings& o, const Checks& checks) {
  checks.in_range("outer.learning_rate", o.learning_rate, 1e-6, 10);
  checks.in_range("outer.momentum", o.momentum, 0, 0.999999);
  checks.positive("outer.fragments", o.fragments);
  if (o.local_steps > 0 && o.fragments > o.local_steps) {
    checks.fail("outer.fragments", "must be <= outer.local_steps (" + std::to_string(o.local_steps) +
                "): each fragment is synchronised once every local_steps steps, one step apart at least; got " +
                std::to_string(o.fragments));
  }
  if (o.sync_within_site && o.local_steps == 0) {
    checks.fail("outer.sync_within_site", "needs outer.local_steps >= 1 (without local steps every replica sums every step)");
  }
  if (o.synchronous_steps < 0) {
    checks.fail("outer.synchronous_steps", "must be >= 0, got " + std::to_string(o.synchronous_steps));
  }
  if (o.synchronous_steps > 0 && o.local_steps == 0) {
    checks.fail("outer.synchronous_steps", "needs outer.local_steps >= 1 (without local steps every step is synchronous)");
  }
}

Section emulation_section(EmulationSettings& e) {
  return {"emulation", "For experiments on one machine only, never for real runs.",
          {{"emulation.compute_slowdown", &e.compute_slowdown,
            "Per rank: its forward and backward (and its device probe) take this many times as long, the extra spent "
            "asleep, so that identical CPUs act as mixed devices; []: none, else one entry per rank."}}};
}

void check_emulation(const EmulationSettings& e, const Checks& checks) {
  for (double factor : e.compute_slowdown) checks.in_range("emulation.compute_slowdown", factor, 1, 1000);
}

Section plan_section(PlanSettings& p) {
  return {"plan", "What geotrain plan and simulate assume where the config cannot know it (train ignores it).",
          {{"plan.ranks", &p.ranks,
            "The job's rank count that plan and simulate price without --ranks or network.matrix (as ranks of one "
            "host with equal links); 0: they need one of those. train uses the ranks it is started on."}}};
}

void check_plan(const PlanSettings& p, const Checks& checks) { checks.in_range("plan.ranks", p.ranks, 0, 1 << 20); }

Section optimizer_section(OptimizerSettings& o) {
  return {"optimizer", "The inner optimizer and its learning-rate schedule (linear warm-up, cosine decay).",
          {{"optimizer.kind", &o.kind, "adamw or sgd (with decoupled weight decay)."},
           {"optimizer.learning_rate", &o.learning_rate, "The peak learning rate."},
           {"optimizer.min_learning_rate_fraction", &o.min_learning_rate_fraction, "The cosine's floor, as a share of the peak."},
           {"optimizer.warmup_steps", &o.warmup_steps, "Steps of linear warm-up."},
           {"optimizer.decay_steps", &o.decay_steps, "Length of the cosine schedule; 0: train.steps."},
           {"optimizer.beta1", &o.beta1, "AdamW's first-moment decay (SGD's momentum)."},
           {"optimizer.beta2", &o.beta2, "AdamW's second-moment decay."},
           {"optimizer.epsilon", &o.epsilon, "AdamW's epsilon."},
           {"optimizer.weight_decay", &o.weight_decay, "Decoupled weight decay."},
           {"optimizer.gradient_clip", &o.gradient_clip, "The global gradient norm is clipped to this; 0: no clipping."}}};
}

void check_optimizer(const OptimizerSettings& o, const Checks& checks) {
  checks.in_range("optimizer.learning_rate", o.learning_rate, 1e-12, 10);
  checks.in_range("optimizer.min_learning_rate_fraction", o.min_learning_rate_fraction, 0, 1);
  checks.in_range("optimizer.beta1", o.beta1, 0, 0.999999);
  checks.in_range("optimizer.beta2", o.beta2, 0, 0.999999);
  checks.in_range("optimizer.epsilon", o.epsilon, 1e-30, 1);
  checks.in_range("optimizer.weight_decay", o.weight_decay, 0, 10);
  checks.in_range("optimizer.gradient_clip", o.gradient_clip, 0, 1e9);
}

}  // namespace

std::vector<Section> sections(Config& c) {
  return {model_section(c.model),           device_section(c.device),         data_section(c.data),
          train_section(c.train),           pipeline_section(c.pipeline),     network_section(c.network),
          compression_section(c.compression), checkpoint_section(c.checkpoint), timing_section(c.timing),
          outer_section(c.outer),           emulation_section(c.emulation),   plan_section(c.plan),
          optimizer_section(c.optimizer)};
}

void check_sections(const Config& c, const Checks& checks) {
  check_train(c.train, checks);
  check_pipeline(c.pipeline, checks);
  check_network(c.network, checks);
  check_checkpoint(c.checkpoint, checks);
  check_model(c.model, checks);
  check_compression(c.compression, checks);
  check_emulation(c.emulation, checks);
  check_plan(c.plan, checks);
  check_optimizer(c.optimizer, checks);
  check_device(c.device, checks);
  check_outer(c.outer, checks);
}

}  // namespace geotrain::io::config_table
