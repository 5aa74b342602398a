#include "geotrain/runtime/trainer.hpp"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>

#include "geotrain/io/errors.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/optimizer.hpp"

namespace geotrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Resuming on another number of replicas changes the sequences per step,
// hence the loss curve, unless the micro-batches per replica change with it:
// say so, and which setting keeps the checkpoint's batch ("" when equal).
std::string batch_change_note(std::int64_t checkpoint_batch, int micro_batch, int micro_batches, int replicas) {
  const std::int64_t per_micro_batch_round = static_cast<std::int64_t>(micro_batch) * replicas;
  const std::int64_t batch = per_micro_batch_round * micro_batches;
  if (checkpoint_batch <= 0 || checkpoint_batch == batch) return "";
  std::string note = "note: the checkpoint's run took " + std::to_string(checkpoint_batch) +
                     " sequences per step, this one takes " + std::to_string(batch) + " (" + std::to_string(replicas) +
                     " replicas x " + std::to_string(micro_batches) + " micro-batches x " + std::to_string(micro_batch) +
                     "): the loss curve will differ";
  if (checkpoint_batch % per_micro_batch_round == 0) {
    note += "; --train.gradient_accumulation=" + std::to_string(checkpoint_batch / per_micro_batch_round) +
            " keeps the checkpoint's batch";
  }
  return note + "\n";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_duration(double seconds) {
  char text[32];
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) std::snprintf(text, sizeof text, "%dh%02dm", s / 3600, s / 60 % 60);
  else std::snprintf(text, sizeof text, "%dm%02ds", s / 60, s % 60);
  return text;
}

model::OptimizerSettings optimizer_settings(const io::Config& c) {
  model::OptimizerSettings s;
  s.learning_rate = c.learning_rate;
  s.min_learning_rate_fraction = c.min_learning_rate_fraction;
  s.warmup_steps = c.warmup_steps;
  s.total_steps = c.train_steps;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.epsilon = c.epsilon;
  s.weight_decay = c.weight_decay;
  s.gradient_clip = c.gradient_clip;
  return s;
}

// A sum over every rank of the job: over the replica's stages, then over
// the replicas.
double sum_over_job(Collectives& collectives, double value) {
  return collectives.sum_data_parallel_value(collectives.sum_over_pipeline(value));
}

// Mean validation loss over the first eval_batches global batches: replica r
// evaluates batches r, r + R, ... (TokenDataset's validation order), each
// through the pipeline, forward only.
double validation_loss(PipelineStep& pipeline, PipelineLinks& links, Collectives& collectives,
                       io::TokenDataset& data, int B, int T, int eval_batches, int replicas) {
  const int per_replica = (eval_batches + replicas - 1) / replicas;
  const auto batches = data.validation_batches(B, T, per_replica);
  double sum = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    sum += pipeline.forward_only({batches[i].inputs.data(), batches[i].targets.data()}, links, static_cast<int>(i));
  }
  const double total = sum_over_job(collectives, sum);
  return batches.empty() ? std::nan("") : total / (static_cast<double>(batches.size()) * replicas);
}

class NoLinks : public PipelineLinks {
 public:
  void send_activation(const float*, std::size_t, int) override { fail(); }
  void receive_activation(float*, std::size_t, int) override { fail(); }
  void send_gradient(const float*, std::size_t, int) override { fail(); }
  void receive_gradient(float*, std::size_t, int) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("a single-stage pipeline has no links"); }
};

void print_progress(std::ostream& log, const io::Config& config, int step, double loss, double lr, double norm,
                    double step_s, double tokens_per_step, double flops, double eta_s) {
  char line[320];
  if (config.log_json) {
    std::snprintf(line, sizeof line,
                  "{\"step\": %d, \"loss\": %.9g, \"lr\": %.6e, \"grad_norm\": %.6g, \"step_ms\": %.3f, "
                  "\"tokens_per_s\": %.1f, \"gflops\": %.3f}",
                  step + 1, loss, lr, norm, 1e3 * step_s, tokens_per_step / step_s, flops / 1e9);
  } else {
    std::string mfu;
    if (config.device_peak_tflops > 0) {
      mfu = " | MFU " + std::to_string(static_cast<int>(100 * flops / (config.device_peak_tflops * 1e12) + 0.5)) + "%";
    }
    std::snprintf(line, sizeof line,
                  "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f GFLOPS%s | ETA %s",
                  step + 1, config.train_steps, loss, lr, norm, 1e3 * step_s, tokens_per_step / step_s,
                  flops / 1e9, mfu.c_str(), format_duration(eta_s).c_str());
  }
  log << line << "\n";
  log.flush();
}

volatile std::sig_atomic_t termination_requested = 0;
extern "C" void request_termination(int) { termination_requested = 1; }

}  // namespace

double flops_per_token(const model::GptConfig& m, double parameters) {
  return 6.0 * parameters + 12.0 * m.layers * m.hidden * static_cast<double>(m.sequence_length);
}

TrainResult train(const io::Config& config, const model::GptConfig& model, const RankRole& role, std::ostream& log) {
  LocalCollectives local_collectives;
  NoLinks no_links;
  if ((role.stages > 1 && role.links == nullptr) ||
      ((role.stages > 1 || role.replicas > 1) && role.collectives == nullptr)) {
    throw std::logic_error("train: a rank of a pipeline or data-parallel job needs links and collectives");
  }
  PipelineLinks& links = role.links ? *role.links : no_links;
  Collectives& collectives = role.collectives ? *role.collectives : local_collectives;

  std::unique_ptr<kernels::Backend> owned_backend;
  if (!role.backend) owned_backend = kernels::make_backend(config.device);
  kernels::Backend* backend = role.backend ? role.backend : owned_backend.get();
  backend->set_matmul_precision(config.matmul_precision == "bf16" ? kernels::MatmulPrecision::bf16
                                                                   : kernels::MatmulPrecision::fp32);
  std::optional<io::TokenDataset> loaded;
  if (!role.data) loaded.emplace(io::TokenDataset::from_shards(config.data_train, config.data_validation,
                                                               model.vocabulary, config.seed));
  io::TokenDataset& data = role.data ? *role.data : *loaded;
  data.set_replica(role.replica, role.replicas);
  const int B = config.micro_batch_sequences, T = model.sequence_length, m = config.gradient_accumulation;
  const plan::Schedule schedule = config.pipeline_schedule == "gpipe" ? plan::Schedule::gpipe : plan::Schedule::one_f_one_b;
  const model::StageSpec spec = role.whole_model ? model::StageSpec::whole(model) : role.spec;
  model::Stage stage(model, spec, *backend, B, plan::activation_slots(schedule, m, role.stages));
  stage.initialize(config.seed);
  model::AdamW optimizer(*backend, stage, optimizer_settings(config));
  PipelineStep pipeline(stage, *backend, schedule, role.stage, role.stages, m);

  TrainResult result;
  // Resume: parameters and moments by name (any layout), the sampler, the step.
  std::optional<io::Checkpoint> loaded_checkpoint;
  const io::Checkpoint* resume = role.resume;
  std::string resume_path = role.resume_path;
  if (!resume && !config.checkpoint_resume.empty()) {
    resume_path = io::resolve_resume(config.checkpoint_dir, config.checkpoint_resume);
    if (!resume_path.empty()) resume = &loaded_checkpoint.emplace(io::read_checkpoint_file(resume_path));
  }
  if (resume) {
    restore_tensors(stage, optimizer, *backend, *resume, resume_path);
    data.restore(resume->sampler);
    result.first_step = static_cast<int>(std::min<std::int64_t>(resume->completed_steps, config.train_steps));
  }
  std::optional<LocalCheckpointSink> local_sink;
  CheckpointSink* sink = role.checkpoints;
  if (!sink && !config.checkpoint_dir.empty()) sink = &local_sink.emplace(config.checkpoint_dir, config.checkpoint_keep);
  if (sink) {
    termination_requested = 0;
    std::signal(SIGTERM, request_termination);  // Slurm's pre-emption notice: checkpoint, then stop
  }
  auto save = [&](int completed_steps) {
    io::Checkpoint metadata;
    metadata.completed_steps = completed_steps;
    metadata.global_batch_sequences = static_cast<std::int64_t>(B) * m * role.replicas;
    metadata.sampler = data.state();
    metadata.model = model;
    metadata.config_text = io::describe(config);
    metadata.plan_text = role.plan_text;
    std::vector<io::CheckpointTensor> tensors;
    if (role.replica == 0) tensors = collect_tensors(stage, optimizer, *backend, role.stages > 1 && spec.has_head);
    result.last_checkpoint = sink->save(std::move(metadata), std::move(tensors));
  };
  // The tied embedding lives on the first and the last stage: count it once.
  const model::ParameterView* wte = stage.find("wte");
  const bool second_copy = wte != nullptr && role.stages > 1 && spec.has_head;
  const double own_parameters = static_cast<double>(stage.parameter_count() - (second_copy ? wte->count : 0));
  const double parameters = sum_over_job(collectives, own_parameters) / role.replicas;
  result.model_flops_per_token = flops_per_token(model, parameters);
  const double tokens_per_step = static_cast<double>(B) * T * m * role.replicas;
  result.tokens_per_step = tokens_per_step;
  const bool talk = role.reports && !config.quiet;
  if (talk) {
    log << "geotrain train: model " << model.name << " (" << static_cast<long long>(parameters) << " parameters, "
        << model.layers << " layers, hidden " << model.hidden << "), " << backend->description() << "\n"
        << "  " << config.train_steps << " steps x " << role.replicas << " replicas x " << m << " micro-batches x "
        << B << " sequences x " << T << " tokens; data " << config.data_train << "\n";
  }
  result.initial_validation_loss =
      validation_loss(pipeline, links, collectives, data, B, T, config.eval_batches, role.replicas);
  if (talk) {
    log << "validation " << (resume ? "at the checkpoint" : "before training") << ": loss "
        << result.initial_validation_loss << "\n";
    if (resume) log << "resumed from " << resume_path << " after step " << result.first_step << "\n";
    if (resume) log << batch_change_note(resume->global_batch_sequences, B, m, role.replicas);
  }

  std::vector<std::vector<int>> inputs(m), targets(m);
  Timeline timeline;
  pipeline.set_timeline(&timeline);
  if (!config.timing_file.empty()) {
    sum_over_job(collectives, 0.0);  // a barrier: every rank's clock starts together
    timeline.start(role.rank, config.timing_max_event_steps);
  }
  const auto run_start = Clock::now();
  StepBreakdown own;  // this rank, summed over the timed steps
  for (int step = result.first_step; step < config.train_steps; ++step) {
    timeline.set_step(step + 1);
    const auto step_start = Clock::now();
    std::vector<MicroBatch> batches;
    for (int i = 0; i < m; ++i) {
      data.next_batch(B, T, inputs[i], targets[i]);  // every stage draws, so all stay in step
      batches.push_back({inputs[i].data(), targets[i].data()});
    }
    stage.zero_grads();
    timeline.record(io::EventKind::data, step_start, Clock::now());
    const double replica_loss = pipeline.run(batches, links, static_cast<float>(1.0 / tokens_per_step));
    const auto sync_start = Clock::now();
    double job_loss = replica_loss;  // summed with the gradient and the norm: no exchange of its own
    const double norm = synchronize_gradients(stage, *backend, collectives, role.stages, role.replicas, &job_loss, &timeline);
    const auto optimizer_start = Clock::now();
    const double sync_s = std::chrono::duration<double>(optimizer_start - sync_start).count();
    const double lr = optimizer.step(step, norm);
    backend->synchronize();
    const auto optimizer_end = Clock::now();
    timeline.record(io::EventKind::optimizer, optimizer_start, optimizer_end);
    const double optimizer_s = std::chrono::duration<double>(optimizer_end - optimizer_start).count();
    const double loss = job_loss / (static_cast<double>(m) * role.replicas);
    const double step_s = seconds_since(step_start);
    if (!std::isfinite(loss)) {
      throw RunError("train: loss became " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                     " (lower optimizer.learning_rate?)");
    }
    result.step_loss.push_back(loss);
    result.step_learning_rate.push_back(lr);
    result.step_grad_norm.push_back(norm);
    result.step_seconds.push_back(step_s);
    if (step > result.first_step || config.train_steps == result.first_step + 1) {
      own.step_s += step_s;
      own.compute_s += pipeline.times().compute_s;
      own.pipeline_s += pipeline.times().pipeline_s;
      own.data_parallel_s += sync_s;
      own.optimizer_s += optimizer_s;
    }
    const double flops = result.model_flops_per_token * tokens_per_step / step_s;
    if (talk && ((step + 1) % config.log_every_steps == 0 || step + 1 == config.train_steps)) {
      const double eta = seconds_since(run_start) / (step + 1) * (config.train_steps - step - 1);
      print_progress(log, config, step, loss, lr, norm, step_s, tokens_per_step, flops, eta);
    }
    const bool last = step + 1 == config.train_steps;
    if (last || (config.eval_every_steps > 0 && (step + 1) % config.eval_every_steps == 0)) {
      const auto evaluation_start = Clock::now();
      timeline.pause(true);
      const double v = validation_loss(pipeline, links, collectives, data, B, T, config.eval_batches, role.replicas);
      timeline.pause(false);
      timeline.record(io::EventKind::evaluate, evaluation_start, Clock::now());
      if (last) result.final_validation_loss = v;
      if (talk) log << "validation at step " << step + 1 << ": loss " << v << "\n";
    }
    if (sink) {
      const auto checkpoint_start = Clock::now();
      timeline.pause(true);
      // Every rank must take the same decision: the signal may reach some only.
      const bool stop = sum_over_job(collectives, termination_requested ? 1.0 : 0.0) > 0 && !last;
      if (stop || last || (config.checkpoint_every_steps > 0 && (step + 1) % config.checkpoint_every_steps == 0)) {
        save(step + 1);
        if (talk) log << "checkpoint " << result.last_checkpoint << "\n";
      }
      timeline.pause(false);
      timeline.record(io::EventKind::checkpoint, checkpoint_start, Clock::now());
      if (stop) {
        result.stopped_by_signal = true;
        break;
      }
    }
  }
  const int done_steps = static_cast<int>(result.step_loss.size());
  const int timed_steps = done_steps > 1 ? done_steps - 1 : 1;
  const double ranks = static_cast<double>(role.stages) * role.replicas;
  auto mean_per_step = [&](double own_total) { return sum_over_job(collectives, own_total) / ranks / timed_steps; };
  result.breakdown = {mean_per_step(own.step_s), mean_per_step(own.compute_s), mean_per_step(own.pipeline_s),
                      mean_per_step(own.data_parallel_s), mean_per_step(own.optimizer_s)};
  result.tokens_per_second = result.breakdown.step_s > 0 ? tokens_per_step / result.breakdown.step_s : 0.0;
  result.events = timeline.take_events();
  result.stage_parameters = static_cast<std::int64_t>(stage.parameter_count());
  result.device = backend->description();
  return result;
}

std::string final_summary(const TrainResult& result) {
  char line[160];
  std::snprintf(line, sizeof line, "final validation loss %.6f (before training %.6f), %.0f tokens/s\n",
                result.final_validation_loss, result.initial_validation_loss, result.tokens_per_second);
  return line;
}

std::string stopped_summary(const TrainResult& result) {
  return "geotrain: stopped by SIGTERM after step " +
         std::to_string(result.first_step + static_cast<int>(result.step_loss.size())) + "; checkpoint " +
         result.last_checkpoint + "; run again with --checkpoint.resume=auto to continue\n";
}

TrainResult train_single_rank(const io::Config& config, const model::GptConfig& model, std::ostream& log) {
  return train(config, model, RankRole{}, log);
}

}  // namespace geotrain::runtime
