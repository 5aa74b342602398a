// Each section of the settings tree: its keys with their doc strings, and
// the checks that need that section alone. The rules between sections live
// in config_rules.cpp.
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "config_fields.hpp"
#include "geotrain/io/model_file.hpp"

namespace geotrain::io::config_table {
namespace {

// A row of a section's table: the key is the field's name, spelt once (the
// section function's settings are `s`; section() puts "name." in front).
#define GT_FIELD(member, ...) Field{#member, &s.member, __VA_ARGS__}

Section section(const char* name, const char* doc, std::vector<Field> fields) {
  for (Field& f : fields) f.key = name + ("." + f.key);
  return {name, doc, std::move(fields)};
}

void check_bounds(const Field& f, const Checks& checks) {
  if (f.bounds.kind == Bounds::none) return;
  std::visit(
      [&](const auto* target) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(target)>>;
        if constexpr (std::is_same_v<T, std::vector<double>>) {
          for (double value : *target) checks.in_range(f.key, value, f.bounds.low, f.bounds.high);
        } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          if (f.bounds.kind == Bounds::positive) checks.positive(f.key, static_cast<long long>(*target));
          else checks.in_range(f.key, static_cast<double>(*target), f.bounds.low, f.bounds.high);
        } else {
          throw std::logic_error(f.key + ": bounds on a field that is not a number");
        }
      },
      f.target);
}

Section model_section(ModelSettings& s) {
  return section(
      "model", "The model's shape: a model file and its overrides (0: the file's value).",
      {GT_FIELD(file, "The shape file (inputs/models/*.toml); relative to the config file.", true),
       GT_FIELD(layers, "Transformer blocks; 0: the model file's."),
       GT_FIELD(hidden, "Width of the residual stream; 0: the model file's."),
       GT_FIELD(heads, "Attention heads (must divide model.hidden); 0: the model file's."),
       GT_FIELD(vocabulary, "Token ids the embedding holds; 0: the model file's."),
       GT_FIELD(sequence_length, "Tokens per sequence; 0: the model file's."),
       GT_FIELD(
           lm_head,
           "The LM head: model-file (as the model file says), tied (the token embedding, as GPT-2; with 2+ stages its "
           "gradient crosses from the last stage to the first every step) or untied (the last stage's own matrix).")});
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

Section device_section(DeviceSettings& s) {
  return section(
      "device", "Where the kernels run and at what precision.",
      {GT_FIELD(kind, "auto (CUDA where a GPU is usable, else the CPU), cpu or cuda (an error without a GPU)."),
       GT_FIELD(matmul_precision,
                "fp32 or bf16: the GEMM operands' precision (master weights, optimizer state, layernorm and softmax "
                "statistics stay fp32; on the CPU bf16 is emulated by rounding, for parity tests)."),
       GT_FIELD(activation_storage,
                "fp32 or bf16: each layer's activations kept for the backward at half the bytes (the forward, the "
                "weights and the optimizer state stay fp32)."),
       GT_FIELD(peak_tflops, "The device's peak, for MFU in the progress line; 0: the backend's default.")
           .in_range(0, 1e6)});
}

Section compression_section(CompressionSettings& s) {
  return section(
      "compression", "What crosses slow links, and how it is encoded (lossy formats keep error feedback where noted).",
      {GT_FIELD(
           gradients,
           "fp32, int8, int4 or topk: the data-parallel gradient sum's wire (with error feedback); with local steps "
           "also the pseudo-gradient's."),
       GT_FIELD(activations, "fp32, int8 or int4: pipeline activations (no error feedback)."),
       GT_FIELD(activation_gradients, "fp32, int8 or int4: pipeline activation gradients (no error feedback)."),
       GT_FIELD(tied_embedding,
                "fp32, int8, int4 or topk: the tied embedding's gradient, summed every step between a pipeline's first "
                "and last stage (with error feedback)."),
       GT_FIELD(group_size, "int8 / int4: values per fp32 scale."),
       GT_FIELD(topk_fraction, "topk: the share of the values sent.")});
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

Section data_section(DataSettings& s) {
  return section("data", "Token shards (tools/prepare_data.py writes them).",
                 {GT_FIELD(train, "The training shard; relative to the config file.", true),
                  GT_FIELD(validation, "The validation shard; relative to the config file.", true)});
}

Section train_section(TrainSettings& s) {
  return section(
      "train", "The training loop: steps, batch, evaluation, logging and samples.",
      {GT_FIELD(steps, "Optimizer steps of the run.").positive(),
       GT_FIELD(micro_batch_sequences, "Sequences per micro-batch (B).").positive(),
       GT_FIELD(gradient_accumulation,
                "Micro-batches per step on one rank; under a pipeline, each replica's micro-batches per step (m).")
           .positive(),
       GT_FIELD(seed, "Seeds the weights, the data order and samples."),
       GT_FIELD(eval_every_steps, "Validation every this many steps; 0: only at the end."),
       GT_FIELD(eval_batches, "Validation batches per evaluation.").positive(),
       GT_FIELD(log_every_steps, "A progress line every this many steps.").positive(),
       GT_FIELD(quiet, "No progress lines."),
       GT_FIELD(log_json, "stdout: JSON lines only (text goes to stderr)."),
       GT_FIELD(metrics_file, "JSON lines, one per step; {job} as in timing.file; \"\": none."),
       GT_FIELD(sample_every_steps,
                "A sample of the model's text every this many steps, drawn as `geotrain sample --seed train.seed` "
                "draws it; 0: never."),
       GT_FIELD(sample_prompt, "The samples' prompt."),
       GT_FIELD(sample_tokens, "Tokens per sample.").positive(),
       GT_FIELD(sample_temperature, "The samples' temperature; 0: greedy.").in_range(0, 1e6)});
}

void check_train(const TrainSettings& t, const Checks& checks) {
  if (t.gradient_accumulation > 16000) {
    checks.fail("train.gradient_accumulation", "must be <= 16000 (message tags), got " + std::to_string(t.gradient_accumulation));
  }
}

Section pipeline_section(PipelineSettings& s) {
  return section(
      "pipeline",
      "The layout: stages, schedule, tensor parallelism and placement. Under mpirun, ranks = "
      "tensor_parallel x stages x data-parallel replicas.",
      {GT_FIELD(stages, "Pipeline stages.").positive(),
       GT_FIELD(schedule, "1f1b or gpipe."),
       GT_FIELD(layers_per_stage, "Blocks of each stage, one entry per stage; []: an even split."),
       GT_FIELD(
           micro_batches_per_flush,
           "A step's micro-batches in flushes of this many (fewer activations alive with GPipe, a bubble per flush); "
           "0: one flush of all of them."),
       GT_FIELD(flushless,
                "No flush between steps (PipeDream-2BW): one unbroken 1F1B stream, each step's gradient computed on "
                "weights one update older than the newest; numerics differ from synchronous training."),
       GT_FIELD(
           flushless_ahead,
           "Flushless: forwards each stage runs ahead of its backwards beyond 1F1B's p - 1 - s, so that a round trip "
           "over a slow link finds work waiting."),
       GT_FIELD(tensor_parallel,
                "Ranks of one node that split every layer of a stage (Megatron-style); must divide model.heads. With "
                "layout = auto: the degree the search must use; 0: the search chooses it."),
       GT_FIELD(layout,
                "fixed (stages, layers_per_stage and the train.* batch as given, every rank used) or auto (rank 0's "
                "layout search chooses stages, replicas, micro-batches, the layer split and which ranks train)."),
       GT_FIELD(
           plan_file,
           "A plan to train exactly, as `geotrain plan --json` printed it; relative to the config file; \"\": none.",
           true),
       GT_FIELD(placement, "planned, rank-order, dtfm-rank-order or random: which device holds which stage."),
       GT_FIELD(plan_candidates, "The planner's search effort (candidates per island).").positive()});
}

void check_pipeline(const PipelineSettings& p, const Checks& checks) {
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

Section network_section(NetworkSettings& s) {
  return section(
      "network", "The network: probed or read from a file, the deadline every wait has, and the transports.",
      {GT_FIELD(matrix,
                "A scenario file to plan on instead of probing (e.g. under emulation); relative to the config file; "
                "\"\": probe.",
                true),
       GT_FIELD(deadline_s, "The longest any rank waits for a peer before the job stops.").in_range(0.01, 1e7),
       GT_FIELD(probe_bytes, "The start-up probe's bandwidth message size.").positive(),
       GT_FIELD(gradient_bucket_mb,
                "Data-parallel gradient sums start in buckets of this many MiB during the step's last backward; 0: one "
                "sum after it.")
           .in_range(0, 1e6),
       GT_FIELD(transport, "auto (NCCL on GPUs where built, else MPI), mpi or nccl."),
       GT_FIELD(dp_exchange,
                "How a data-parallel group sums gradients over MPI: direct (every member with every other), "
                "hierarchical (inside each site first, then across sites striped over the site's members, then back; "
                "needs sites) or auto (whichever the simulator predicts faster for the group; direct without sites). "
                "fp32 sums give the same bits either way.")});
}

Section checkpoint_section(CheckpointSettings& s) {
  return section(
      "checkpoint", "HDF5 checkpoints: where, how often, how they are written, and what a run starts from.",
      {GT_FIELD(dir, "Where checkpoints go; relative to the working directory; \"\": none."),
       GT_FIELD(every_steps, "A checkpoint every this many steps; 0: only at the end (and on SIGTERM)."),
       GT_FIELD(keep, "The newest checkpoints kept.").positive(),
       GT_FIELD(resume, "\"\", auto (checkpoint.dir's latest, if any) or a checkpoint to continue."),
       GT_FIELD(init_from,
                "A checkpoint whose weights and model start the run (fresh optimizer, step 0, data from the start; model.file "
                "not read): fine-tuning. "
                "With resume = auto a checkpoint already in checkpoint.dir wins."),
       GT_FIELD(asynchronous, "Written by a background thread while training goes on."),
       GT_FIELD(deadline_s,
                "Under mpirun, the longest the training thread waits for a write in flight before every rank stops.")
           .in_range(0.01, 1e7),
       GT_FIELD(
           snapshot,
           "On the CPU: copy parameters and moments before an asynchronous write (12 bytes per parameter), so that "
           "only the copy holds training up; false: the next optimizer step waits for the write."),
       GT_FIELD(form, "auto, single, sharded, parallel or per_site (docs/checkpoints.md).")});
}

void check_checkpoint(const CheckpointSettings& c, const Checks& checks) {
  if (c.resume == "auto" && c.dir.empty()) {
    checks.fail("checkpoint.resume", "auto needs checkpoint.dir (where to look for the latest checkpoint)");
  }
  if (!c.init_from.empty() && !c.resume.empty() && c.resume != "auto") {
    checks.fail("checkpoint.init_from", "cannot be combined with checkpoint.resume = \"" + c.resume +
                "\" (init_from starts a new run from weights; resume continues one)");
  }
}

Section timing_section(TimingSettings& s) {
  return section("timing", "The run's HDF5 timing file (analysis/ reads it).",
                 {GT_FIELD(file,
                           "The timing file; {job}: the Slurm job id or the start time; relative to the working "
                           "directory; \"\": none."),
                  GT_FIELD(max_event_steps, "Steps whose events are kept (the first ones); per-step records always.")});
}

Section outer_section(OuterSettings& s) {
  return section(
      "outer", "Local steps (DiLoCo): replicas step on their own data and synchronise every local_steps steps.",
      {GT_FIELD(local_steps,
                "Inner optimizer steps between outer synchronisations (H); 0: synchronous data parallelism."),
       GT_FIELD(learning_rate, "The outer Nesterov step's learning rate.").in_range(1e-6, 10),
       GT_FIELD(momentum, "The outer Nesterov step's momentum.").in_range(0, 0.999999),
       GT_FIELD(
           fragments,
           "Streaming: a stage's parameters in this many fragments, synchronised at staggered steps, each exchange "
           "overlapping the inner steps; 1: the whole stage at once.")
           .positive(),
       GT_FIELD(sync_within_site,
                "Replicas in one site sum their gradients every step; only the sites take local steps."),
       GT_FIELD(
           synchronous_steps,
           "Post-local SGD: the first this many steps synchronous, then local steps from the parameters they reach.")});
}

void check_outer(const OuterSettings& o, const Checks& checks) {
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

Section emulation_section(EmulationSettings& s) {
  return section(
      "emulation", "For experiments on one machine only, never for real runs.",
      {GT_FIELD(
           compute_slowdown,
           "Per rank: its forward and backward (and its device probe) take this many times as long, the extra spent "
           "asleep, so that identical CPUs act as mixed devices; []: none, else one entry per rank.")
           .in_range(1, 1000)});
}

Section plan_section(PlanSettings& s) {
  return section(
      "plan", "What geotrain plan and simulate assume where the config cannot know it (train ignores it).",
      {GT_FIELD(ranks,
                "The job's rank count that plan and simulate price without --ranks or network.matrix (as ranks of one "
                "host with equal links); 0: they need one of those. train uses the ranks it is started on.")
           .in_range(0, 1 << 20)});
}

Section optimizer_section(OptimizerSettings& s) {
  return section(
      "optimizer", "The inner optimizer and its learning-rate schedule (linear warm-up, cosine decay).",
      {GT_FIELD(kind, "adamw or sgd (with decoupled weight decay)."),
       GT_FIELD(learning_rate, "The peak learning rate.").in_range(1e-12, 10),
       GT_FIELD(min_learning_rate_fraction, "The cosine's floor, as a share of the peak.").in_range(0, 1),
       GT_FIELD(warmup_steps, "Steps of linear warm-up."),
       GT_FIELD(decay_steps, "Length of the cosine schedule; 0: train.steps."),
       GT_FIELD(beta1, "AdamW's first-moment decay (SGD's momentum).").in_range(0, 0.999999),
       GT_FIELD(beta2, "AdamW's second-moment decay.").in_range(0, 0.999999),
       GT_FIELD(epsilon, "AdamW's epsilon.").in_range(1e-30, 1),
       GT_FIELD(weight_decay, "Decoupled weight decay.").in_range(0, 10),
       GT_FIELD(gradient_clip, "The global gradient norm is clipped to this; 0: no clipping.").in_range(0, 1e9)});
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
  Config copy = c;  // sections() points into the config it is given; the bounds only read
  const std::vector<Section> all = sections(copy);
  auto bounds = [&](const std::string& name) {
    for (const Section& s : all) {
      if (s.name != name) continue;
      for (const Field& f : s.fields) check_bounds(f, checks);
    }
  };
  bounds("train");
  check_train(c.train, checks);
  bounds("pipeline");
  check_pipeline(c.pipeline, checks);
  bounds("network");
  bounds("checkpoint");
  check_checkpoint(c.checkpoint, checks);
  check_model(c.model, checks);
  check_compression(c.compression, checks);
  bounds("emulation");
  bounds("plan");
  bounds("optimizer");
  bounds("device");
  bounds("outer");
  check_outer(c.outer, checks);
}

}  // namespace geotrain::io::config_table
