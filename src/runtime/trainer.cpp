#include "geotrain/runtime/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "geotrain/io/errors.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/optimizer.hpp"

namespace geotrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

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

double validation_loss(model::Stage& stage, io::TokenDataset& data, int batches) {
  const int B = stage.micro_batch(), T = stage.config().sequence_length;
  double sum = 0;
  int count = 0;
  for (const auto& batch : data.validation_batches(B, T, batches)) {
    sum += stage.forward(0, batch.inputs.data(), nullptr, batch.targets.data());
    ++count;
  }
  return count ? sum / count : std::nan("");
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

}  // namespace

double flops_per_token(const model::GptConfig& m, double parameters) {
  return 6.0 * parameters + 12.0 * m.layers * m.hidden * static_cast<double>(m.sequence_length);
}

TrainResult train_single_rank(const io::Config& config, const model::GptConfig& model, std::ostream& log) {
  auto backend = kernels::make_backend(config.device);
  backend->set_matmul_precision(config.matmul_precision == "bf16" ? kernels::MatmulPrecision::bf16
                                                                   : kernels::MatmulPrecision::fp32);
  io::TokenDataset data = io::TokenDataset::from_shards(config.data_train, config.data_validation,
                                                       model.vocabulary, config.seed);
  const int B = config.micro_batch_sequences, T = model.sequence_length;
  model::Stage stage(model, model::StageSpec::whole(model), *backend, B, 1);
  stage.initialize(config.seed);
  model::AdamW optimizer(*backend, stage, optimizer_settings(config));

  TrainResult result;
  result.model_flops_per_token = flops_per_token(model, static_cast<double>(stage.parameter_count()));
  const double tokens_per_step = static_cast<double>(B) * T * config.gradient_accumulation;
  if (!config.quiet) {
    log << "geotrain train: model " << model.name << " (" << stage.parameter_count() << " parameters, "
        << model.layers << " layers, hidden " << model.hidden << "), " << backend->description() << "\n"
        << "  " << config.train_steps << " steps x " << config.gradient_accumulation << " micro-batches x " << B
        << " sequences x " << T << " tokens; data " << config.data_train << "\n";
  }
  result.initial_validation_loss = validation_loss(stage, data, config.eval_batches);
  if (!config.quiet) log << "validation before training: loss " << result.initial_validation_loss << "\n";

  std::vector<int> inputs, targets;
  const auto run_start = Clock::now();
  double timed_seconds = 0;  // training steps after the first (which pays for warm-up)
  for (int step = 0; step < config.train_steps; ++step) {
    const auto step_start = Clock::now();
    stage.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < config.gradient_accumulation; ++micro) {
      data.next_batch(B, T, inputs, targets);
      loss += stage.forward(0, inputs.data(), nullptr, targets.data());
      stage.backward(0, nullptr, static_cast<float>(1.0 / tokens_per_step));
    }
    loss /= config.gradient_accumulation;
    if (!std::isfinite(loss)) throw RunError("train: loss became " + std::to_string(loss) + " at step " +
                                             std::to_string(step + 1) + " (lower optimizer.learning_rate?)");
    const double norm = std::sqrt(optimizer.gradient_sum_of_squares());
    const double lr = optimizer.step(step, norm);
    backend->synchronize();
    result.step_loss.push_back(loss);
    const double step_s = seconds_since(step_start);
    if (step > 0) timed_seconds += step_s;
    const double flops = result.model_flops_per_token * tokens_per_step / step_s;
    if (!config.quiet && ((step + 1) % config.log_every_steps == 0 || step + 1 == config.train_steps)) {
      char line[256];
      const double eta = seconds_since(run_start) / (step + 1) * (config.train_steps - step - 1);
      std::string mfu = "";
      if (config.device_peak_tflops > 0) mfu = " | MFU " + std::to_string(static_cast<int>(100 * flops / (config.device_peak_tflops * 1e12) + 0.5)) + "%";
      if (config.log_json) {
        std::snprintf(line, sizeof line,
                      "{\"step\": %d, \"loss\": %.6f, \"lr\": %.3e, \"grad_norm\": %.4f, \"step_ms\": %.2f, "
                      "\"tokens_per_s\": %.1f, \"gflops\": %.2f}",
                      step + 1, loss, lr, norm, 1e3 * step_s, tokens_per_step / step_s, flops / 1e9);
        log << line << "\n";
      } else {
        std::snprintf(line, sizeof line,
                      "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f GFLOPS%s | ETA %s",
                      step + 1, config.train_steps, loss, lr, norm, 1e3 * step_s, tokens_per_step / step_s,
                      flops / 1e9, mfu.c_str(), format_duration(eta).c_str());
        log << line << "\n";
      }
      log.flush();
    }
    const bool last = step + 1 == config.train_steps;
    if (last || (config.eval_every_steps > 0 && (step + 1) % config.eval_every_steps == 0)) {
      const double v = validation_loss(stage, data, config.eval_batches);
      if (last) result.final_validation_loss = v;
      if (!config.quiet) log << "validation at step " << step + 1 << ": loss " << v << "\n";
    }
  }
  if (config.train_steps > 1) {
    result.tokens_per_second = tokens_per_step * (config.train_steps - 1) / timed_seconds;
  }
  return result;
}

}  // namespace geotrain::runtime
