// Subcommands of the geotrain executable. Each returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "geotrain/common/wire_bytes.hpp"

namespace CLI {
class App;
}

namespace geotrain::cli {

// --compress-* options of plan and simulate: the runtime's [compression]
// keys, priced with the runtime's encoded sizes (common/wire_bytes.hpp).
struct CompressionOptions {
  std::string activations;           // "": the model's bytes per value (fp16); fp32 | int8 | int4
  std::string activation_gradients;  // the same, for the activations' gradients going back
  std::string gradients;             // "": fp32; fp32 | int8 | int4 | topk
  std::string tied_embedding;        // the same, for the tied embedding's per-step sum
  double topk_fraction = kDefaultTopkFraction;  // as compression.topk_fraction
  int group_size = kDefaultWireGroupSize;       // as compression.group_size
};

// --local-steps, --outer-wire, --outer-fragments, --outer-within-site of plan
// and simulate: the runtime's outer.local_steps, compression.gradients (the
// pseudo-gradient's wire under local steps), outer.fragments and
// outer.sync_within_site.
struct OuterOptions {
  int local_steps = -1;  // -1: not given (synchronous, output as before); 0: synchronous; H >= 1: local steps
  std::string wire;      // "": fp32; fp32 | int8 | int4 (group size: --group-size)
  int fragments = 1;     // 1: the whole stage at each sync; F > 1: streamed in F fragments
  bool within_site = false;  // a site's replicas still sum every step
  bool given() const { return local_steps >= 0; }
};

// A training config given to plan or simulate (src/cli/config_run.hpp).
struct ConfigRunOptions {
  std::string config_file;                       // "": scenario-only use
  std::vector<std::string> overrides;            // --section.key=value after it
  int ranks = 0;                                 // no network: this many ranks of one host
  std::vector<std::string> scenario_flags_given; // flags a config replaces, given anyway
};

// What plan and simulate share: a training config, or a scenario file with
// a model file and the degrees (src/cli/config_run.hpp).
struct ScenarioCommandOptions {
  ConfigRunOptions run;
  std::string scenario;
  std::string model;   // model file (inputs/models/*.toml); plan: "" for the scenario's [workload] model
  int pp = 0, dp = 0;  // 0: from the scenario file
};

struct PlanCommandOptions : ScenarioCommandOptions {
  int tp = 0;          // tensor-parallel degree for the layout search; 0: searched
  double tp_efficiency = 1.0;  // a unit's speed factor for t > 1 on top of the priced all-reduces
  unsigned long long seed = 1;
  int candidates = 5000;
  int random_samples = 5000;
  std::string local_search = "swap";
  bool paper_exact = false;
  int islands = 1;
  int threads = 1;
  bool json = false;
  bool skip_baselines = false;
  std::string json_out;        // also write the JSON plan here
  std::string rankfile;        // Open MPI rankfile: rank r on the host of device r
  std::string hostfile;        // Open MPI hostfile: each host with its device count
  std::string slurm_hostfile;  // one host per rank, for SLURM_HOSTFILE + srun --distribution=arbitrary
  CompressionOptions compression;
  OuterOptions outer;
  bool candidates_given = false;  // --candidates on the command line (the layout search's default is smaller)
  // The layout (src/plan/README.md, "Layout search"): "auto" searches pp,
  // dp, micro-batch, layers per stage and idle devices; "fixed" keeps the
  // given degrees; "": auto when neither the command line nor the file gives them.
  std::string layout;
  int batch = 0;                   // global batch in sequences; 0: model file [batch] or the scenario's
  int micro_batch = 0;             // fixed micro-batch; 0: searched (fixed mode: model file or 1)
  int pipeline_micro_batches = 0;  // fixed flush; 0: searched (GPipe) or one flush
  std::string schedule = "1f1b";   // the runtime's default
  std::string dp_scheme = "auto";  // geotrain's MPI exchanges as network.dp_exchange = auto chooses them
  std::string recompute = "off";   // the runtime keeps all activations
  std::string activation_storage = "fp32";  // the runtime's device.activation_storage
  std::string lm_head = "on";      // the runtime computes the loss with the tied head (simulate --system geotrain)
  double gradient_bucket_mb = 25;  // the runtime's network.gradient_bucket_mb
  double peak_tflops = 0;          // untyped devices; 0: model file [device] or V100
  double efficiency = 0;           // 0: model file [device] or the calibrated constant
  double device_memory_gib = 0;    // untyped devices; 0: unlimited
  double memory_reserve_gib = 1.0; // per device, outside the model
};

void add_plan_command(CLI::App& app, PlanCommandOptions& options);
int run_plan_command(const PlanCommandOptions& options);

struct SimulateCommandOptions : ScenarioCommandOptions {
  int layers = 0;                  // 0: from the model file
  int vocabulary = 0;              // 0: from the model file
  int batch = 0;                   // global batch in sequences; 0: model file [batch] or 1024
  int micro_batch = 0;             // sequences per micro-batch; 0: model file [batch] or 1
  int pipeline_micro_batches = -1; // micro-batches per flush; -1: by --system (dtfm 64, megatron all); 0: all
  double peak_tflops = 0;          // 0: model file [device] or V100
  double efficiency = 0;           // 0: model file [device] or the calibrated constant
  double bandwidth_scale = 1.0;    // multiplies every bandwidth of the scenario
  std::string placement = "planned";
  std::string system = "dtfm";     // preset for the four runtime choices below
  std::string schedule;            // "" = by --system
  bool flushless = false;          // pipeline.flushless: 1F1B, no flush between steps
  int flushless_ahead = 0;         // pipeline.flushless_ahead
  std::string dp_scheme;
  std::string overlap;             // "on" / "off"
  std::string recompute = "on";
  std::string lm_head;             // "on" / "off"; "": off, or on with --untied-head
  bool untied_head = false;        // the last stage holds its own head; no tied-embedding exchange
  CompressionOptions compression;
  OuterOptions outer;
  // outer.synchronous_steps: the first `synchronous_steps` of a run of
  // `run_steps` are synchronous steps of the same placement; 0: none.
  int synchronous_steps = 0;
  int run_steps = 0;
  double gradient_bucket_mb = -1;  // > 0: data-parallel sums start in buckets during the last backward; < 0: by --system
  double flush_tolerance = 0.02;   // the recommended flush: utilisation within this share of the best
  std::string flops_formula = "paper";
  unsigned long long seed = 1;
  int candidates = 5000;
  bool json = false;
  bool timeline = false;           // CSV of every timed step instead of the table
};

void add_simulate_command(CLI::App& app, SimulateCommandOptions& options);
int run_simulate_command(const SimulateCommandOptions& options);

// What a subcommand that takes a run configuration reads: [CONFIG.toml] then
// --section.key=value overrides, which the config loader checks.
struct ConfigCommandOptions {
  std::string config_file;
  std::vector<std::string> overrides;  // "--section.key=value"
};
using TrainCommandOptions = ConfigCommandOptions;

// `name` as such a subcommand, usage "geotrain NAME [CONFIG.toml] ...".
CLI::App* add_config_subcommand(CLI::App& app, const std::string& name, const std::string& description,
                                ConfigCommandOptions& options);

// Under mpirun or srun (built with MPI training): the exit code of the
// distributed form of train or eval (`evaluation`) run with `options`;
// else -1: the caller runs alone.
int run_if_launched_by_mpi(const ConfigCommandOptions& options, bool evaluation);

void add_train_command(CLI::App& app, TrainCommandOptions& options);
int run_train_command(const TrainCommandOptions& options);

// geotrain convert: a Hugging Face GPT-2 folder to a weights-only
// checkpoint (--from-hf), or a checkpoint to such a folder (--to-hf).
struct ConvertCommandOptions {
  std::string from_hf;      // folder with config.json + model.safetensors
  std::string to_hf;        // checkpoint file
  std::string out;          // checkpoint file (from-hf) or folder (to-hf)
  int sequence_length = 0;  // from-hf: positions kept; 0 = n_positions
  bool overwrite = false;   // to-hf: write into a folder that is not empty
};

void add_convert_command(CLI::App& app, ConvertCommandOptions& options);
int run_convert_command(const ConvertCommandOptions& options);

// geotrain sample: text from a checkpoint's model, on one process.
struct SampleCommandOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  int tokens = 64;
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: every token
  unsigned long long seed = 1;
  std::string device = "auto";
};

void add_sample_command(CLI::App& app, SampleCommandOptions& options);
int run_sample_command(const SampleCommandOptions& options);

// geotrain eval: the validation loss of a checkpoint (checkpoint.resume),
// alone or as every rank of an mpirun/srun job; the train command's config.
using EvalCommandOptions = ConfigCommandOptions;

void add_eval_command(CLI::App& app, EvalCommandOptions& options);
int run_eval_command(const EvalCommandOptions& options);

// geotrain probe (built with MPI only; see GEOTRAIN_HAVE_MPI). Initialises
// MPI itself: run it under mpirun.
struct ProbeCommandOptions {
  std::string out;
  long long bytes = 4ll << 20;   // bandwidth message size
  int repeats = 4;               // timed bandwidth messages per direction and pair
  int latency_repeats = 20;      // timed small round trips per pair
  double deadline_s = 30;        // per network wait
  std::string device = "auto";   // whose speed and memory are measured: auto | cpu | cuda | none
  std::string precision = "fp32";  // the GEMM's: fp32 | bf16 (the training's device.matmul_precision)
};

void add_probe_command(CLI::App& app, ProbeCommandOptions& options);
int run_probe_command(const ProbeCommandOptions& options);

}  // namespace geotrain::cli
