#include "geotrain/runtime/progress_log.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/timing_file.hpp"

namespace geotrain::runtime {
namespace {

struct KnownGpu {
  const char* name;  // found in the device's name; more specific names first
  double bf16_tflops, fp32_tflops;  // dense: tensor-core bf16 (fp16 on V100), plain fp32
};

// Vendor datasheet peaks, dense (no sparsity), SXM parts unless named.
constexpr KnownGpu kKnownGpus[] = {
    {"H200", 989, 67},  {"H100 PCIe", 756, 51}, {"H100", 989, 67}, {"A100", 312, 19.5}, {"V100", 125, 15.7},
    {"L40S", 362, 91.6}, {"L4", 121, 30.3},      {"A10", 125, 31.2}, {"T4", 65, 8.1},
};

std::string format_duration(double seconds) {
  char text[32];
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) std::snprintf(text, sizeof text, "%dh%02dm", s / 3600, s / 60 % 60);
  else std::snprintf(text, sizeof text, "%dm%02ds", s / 60, s % 60);
  return text;
}

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
      continue;
    }
    quoted += c;
  }
  return quoted + "\"";
}

// JSON has no NaN: a loss that is not a number is written as null.
std::string json_number(double value, const char* format = "%.9g") {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

std::ostream& text_stream(const io::Config& config, std::ostream& out) { return config.log_json ? std::cerr : out; }

double known_peak_tflops(const std::string& device_description, MatmulPrecision precision) {
  if (device_description.rfind("CUDA", 0) != 0) return 0;
  for (const KnownGpu& gpu : kKnownGpus) {
    if (device_description.find(gpu.name) != std::string::npos) {
      return precision == MatmulPrecision::bf16 ? gpu.bf16_tflops : gpu.fp32_tflops;
    }
  }
  return 0;
}

double peak_tflops(const io::Config& config, const std::string& device_description) {
  return config.device_peak_tflops > 0 ? config.device_peak_tflops
                                       : known_peak_tflops(device_description, config.matmul_precision);
}

ProgressLog::ProgressLog(const io::Config& config, std::ostream& out, bool reports, double peak_tflops)
    : config_(config), out_(out), reports_(reports), peak_flops_per_s_(peak_tflops * 1e12), null_(nullptr) {
  if (!reports_ || config.metrics_file.empty()) return;
  metrics_path_ = io::expand_run_name(config.metrics_file);
  const auto folder = std::filesystem::path(metrics_path_).parent_path();
  std::error_code ignored;
  if (!folder.empty()) std::filesystem::create_directories(folder, ignored);
  metrics_.open(metrics_path_, std::ios::app);
  if (!metrics_) {
    throw RunError("train.metrics_file: cannot write " + metrics_path_ + " (does its folder exist and allow writing?)");
  }
}

std::ostream& ProgressLog::text() {
  if (!reports_ || config_.quiet) return null_;
  return text_stream(config_, out_);
}

void ProgressLog::record(const std::string& json_line, bool on_stdout) {
  if (!reports_) return;
  if (metrics_.is_open()) {
    metrics_ << json_line << "\n";
    metrics_.flush();  // readable while the run goes on (tail -f, a plot)
  }
  if (on_stdout && config_.log_json) {
    out_ << json_line << "\n";
    out_.flush();
  }
}

void ProgressLog::step(const StepReport& r) {
  loss_sum_ += r.loss;
  ++loss_count_;
  const double flops_per_s = r.model_flops_per_token * r.tokens_per_step / r.step_s;
  const double utilisation = r.step_s > 0 ? r.compute_s / r.step_s : 0;
  const double mfu = peak_flops_per_s_ > 0 ? flops_per_s / peak_flops_per_s_ : std::nan("");
  const bool prints = r.step % config_.log_every_steps == 0 || r.step == config_.train_steps;
  const double interval_loss = loss_sum_ / loss_count_;
  std::string json = "{\"event\": \"step\", \"step\": " + std::to_string(r.step) +
                     ", \"loss\": " + json_number(r.loss) + ", \"lr\": " + json_number(r.learning_rate, "%.6e") +
                     ", \"grad_norm\": " + json_number(r.grad_norm, "%.6g") +
                     ", \"step_ms\": " + json_number(1e3 * r.step_s, "%.3f") +
                     ", \"tokens_per_s\": " + json_number(r.tokens_per_step / r.step_s, "%.1f") +
                     ", \"gflops\": " + json_number(flops_per_s / 1e9, "%.3f") +
                     ", \"compute_utilisation\": " + json_number(utilisation, "%.4f") +
                     ", \"mfu\": " + json_number(mfu, "%.4f") + "}";
  if (prints) {
    json.insert(json.size() - 1, ", \"interval_mean_loss\": " + json_number(interval_loss) +
                                     ", \"interval_steps\": " + std::to_string(loss_count_));
    loss_sum_ = 0;
    loss_count_ = 0;
  }
  record(json, prints);
  if (!prints || config_.log_json || !reports_ || config_.quiet) return;
  std::string mfu_text = std::isfinite(mfu) ? " | MFU " + std::to_string(static_cast<int>(100 * mfu + 0.5)) + "%" : "";
  char line[320];
  std::snprintf(line, sizeof line,
                "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f GFLOPS%s | "
                "util %3.0f%% | ETA %s",
                r.step, config_.train_steps, interval_loss, r.learning_rate, r.grad_norm, 1e3 * r.step_s,
                r.tokens_per_step / r.step_s, flops_per_s / 1e9, mfu_text.c_str(), 100 * utilisation,
                format_duration(r.eta_s).c_str());
  out_ << line << "\n";
  out_.flush();
}

void ProgressLog::validation(int step, double loss) {
  record("{\"event\": \"validation\", \"step\": " + std::to_string(step) +
             ", \"validation_loss\": " + json_number(loss) + "}",
         true);
  text() << "validation at step " << step << ": loss " << loss << "\n";
}

void ProgressLog::checkpoint(int step, const std::string& path) {
  record("{\"event\": \"checkpoint\", \"step\": " + std::to_string(step) + ", \"path\": " + json_string(path) + "}",
         true);
  text() << "checkpoint " << path << "\n";
}

void ProgressLog::end(const RunEnd& e) {
  record("{\"event\": \"end\", \"steps\": " + std::to_string(e.steps) +
             ", \"stopped\": " + (e.stopped ? "true" : "false") +
             ", \"initial_validation_loss\": " + json_number(e.initial_validation_loss) +
             ", \"final_validation_loss\": " + json_number(e.final_validation_loss) +
             ", \"tokens_per_s\": " + json_number(e.tokens_per_s, "%.1f") +
             ", \"compute_utilisation_mean\": " + json_number(e.utilisation_mean, "%.4f") +
             ", \"compute_utilisation_min\": " + json_number(e.utilisation_min, "%.4f") +
             ", \"compute_utilisation_min_rank\": " + std::to_string(e.utilisation_min_rank) +
             ", \"replicas_identical\": " + (e.replicas_identical ? "true" : "false") + "}",
         true);
}

}  // namespace geotrain::runtime
