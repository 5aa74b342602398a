// The run configuration: a tree of sections whose field names are the keys
// (`config.compression.gradients` is `[compression] gradients`), loaded from a
// TOML file, then `--section.key=value` overrides. Unknown keys are fatal,
// every field has a default, a unit in its name where it has one, a doc
// string and a check (src/io/config_sections.cpp; the rules that tie
// sections together: src/io/config_rules.cpp). docs/config.md is generated
// from the same table (`geotrain train --help`).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/common/run_choices.hpp"
#include "geotrain/common/wire_bytes.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"
#include "geotrain/plan/placement.hpp"

namespace geotrain::io {

// [model]: the shape file and its overrides (0: the file's value); load_model() applies them.
struct ModelSettings {
  std::string file = "inputs/models/tiny.toml";
  int layers = 0, hidden = 0, heads = 0, vocabulary = 0, sequence_length = 0;
  LmHead lm_head = LmHead::model_file;
};

// [device]
struct DeviceSettings {
  DeviceRequest kind = DeviceRequest::automatic;
  MatmulPrecision matmul_precision = MatmulPrecision::fp32;
  ActivationStorage activation_storage = ActivationStorage::fp32;
  double peak_tflops = 0;  // for MFU; 0: the backend's default
};

// [compression]: what crosses slow links (runtime/wire_codec.hpp).
struct CompressionSettings {
  WireFormat gradients = WireFormat::fp32;
  WireFormat activations = WireFormat::fp32;
  WireFormat activation_gradients = WireFormat::fp32;
  WireFormat tied_embedding = WireFormat::fp32;
  int group_size = kDefaultWireGroupSize;
  double topk_fraction = kDefaultTopkFraction;

  // `format` with this section's group size and top-k share.
  WireEncoding encoding(WireFormat format) const { return WireEncoding{format, group_size, topk_fraction}; }
  // As encoding(), but none for fp32 (the simulator's "as is").
  std::optional<WireEncoding> lossy_encoding(WireFormat format) const {
    if (format == WireFormat::fp32) return std::nullopt;
    return encoding(format);
  }
};

// [data]: token shards; paths in a file are relative to the file.
struct DataSettings {
  std::string train = "inputs/data/corpus_train.bin";
  std::string validation = "inputs/data/corpus_val.bin";
};

// [train]
struct TrainSettings {
  int steps = 300;
  int micro_batch_sequences = 8;
  int gradient_accumulation = 1;
  std::uint64_t seed = 1;
  int eval_every_steps = 50;
  int eval_batches = 8;
  int log_every_steps = 1;
  bool quiet = false;
  bool log_json = false;
  std::string metrics_file = "runs/metrics-{job}.jsonl";
  int sample_every_steps = 0;
  std::string sample_prompt = "\n";
  int sample_tokens = 64;
  double sample_temperature = 1.0;
};

// [pipeline]: under mpirun, ranks = tensor_parallel x stages x replicas.
struct PipelineSettings {
  int stages = 1;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  std::vector<int> layers_per_stage;
  int micro_batches_per_flush = 0;
  bool flushless = false;
  int flushless_ahead = 0;
  int tensor_parallel = 1;
  LayoutChoice layout = LayoutChoice::fixed;
  std::string plan_file;
  plan::Placement placement = plan::Placement::planned;
  int plan_candidates = 2000;
};

// [network]
struct NetworkSettings {
  std::string matrix;
  double deadline_s = 120;
  int probe_bytes = 1 << 20;
  double gradient_bucket_mb = 25;
  Transport transport = Transport::automatic;
  DataParallelExchange dp_exchange = DataParallelExchange::automatic;
};

// [checkpoint]
struct CheckpointSettings {
  std::string dir;
  int every_steps = 0;
  int keep = 3;
  std::string resume;
  std::string init_from;
  bool asynchronous = true;
  double deadline_s = 3600;
  bool snapshot = false;
  CheckpointForm form = CheckpointForm::automatic;
};

// [timing]: the run's HDF5 timing file (io/timing_file.hpp).
struct TimingSettings {
  std::string file = "runs/timing-{job}.h5";
  int max_event_steps = 1000;
};

// [outer]: local steps (DiLoCo); local_steps = 0 is synchronous data parallelism.
struct OuterSettings {
  int local_steps = 0;
  double learning_rate = 0.7;
  double momentum = 0.9;
  int fragments = 1;
  bool sync_within_site = false;
  int synchronous_steps = 0;
};

// [emulation]: for experiments on one machine only, never for real runs.
struct EmulationSettings {
  std::vector<double> compute_slowdown;
};

// [plan]: what `geotrain plan` and `geotrain simulate` assume where a config
// cannot know it; `train` uses the ranks it is started on.
struct PlanSettings {
  int ranks = 0;
};

// [optimizer]
struct OptimizerSettings {
  InnerOptimizer kind = InnerOptimizer::adamw;
  double learning_rate = 1e-3;
  double min_learning_rate_fraction = 0.1;
  int warmup_steps = 20;
  int decay_steps = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.1;
  double gradient_clip = 1.0;
};

struct Config {
  ModelSettings model;
  DeviceSettings device;
  DataSettings data;
  TrainSettings train;
  PipelineSettings pipeline;
  NetworkSettings network;
  CompressionSettings compression;
  CheckpointSettings checkpoint;
  TimingSettings timing;
  OuterSettings outer;
  EmulationSettings emulation;
  PlanSettings plan;
  OptimizerSettings optimizer;

  std::string source;                          // the file it came from, for messages
  std::vector<std::string> command_line_keys;  // keys set by overrides, for messages

  // Where `key`'s value came from: "command line" or the config file.
  std::string origin_of(const std::string& key) const;
  // The one form of a bad setting: "<origin>: <key>: <what>" (exit 2).
  InputError error(const std::string& key, const std::string& what) const;
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
// (errors name the override's origin and key). With checkpoint.init_from,
// the model is that checkpoint's instead (model.file is not read): see
// model_of_checkpoint.
ModelFile load_model(const Config& config);
struct Checkpoint;
// The model of `checkpoint` (read from `path`), which `command` ("eval",
// "checkpoint.init_from") takes; a model.* key set to another value (shape,
// lm_head) is an InputError naming both values.
ModelShape model_of_checkpoint(const Config& config, const Checkpoint& checkpoint, const std::string& path,
                               const std::string& command);
// The rules that need the job's rank count and the model (under mpirun, once
// both are known): ranks = tensor_parallel x stages x replicas, and so on.
void check_rank_count(const Config& config, const ModelShape& model, int ranks);
// pipeline.tensor_parallel where it is fixed (1 where the search chooses it).
int fixed_tensor_parallel(const Config& config);
// Every key with its value as TOML ("section.key = value" dotted keys, one a
// line; for logs, checkpoints and timing files).
std::string describe(const Config& config);
// Every key with its default, type and doc string: Markdown (docs/config.md)
// or plain text (`geotrain train --help`).
std::string config_reference_markdown();
std::string config_reference_text();

}  // namespace geotrain::io
