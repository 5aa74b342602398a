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

// JSON has no NaN: a loss that is not a number is written as null.
std::string json_number(double value, const char* format = "%.9g") {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// The UTF-8 sequence at text[at]: its length, and whether it is well formed.
// An ill-formed one spans its maximal valid prefix (at least one byte), the
// unit Unicode recommends replacing by one U+FFFD (as Python's and
// browsers' decoders do).
std::size_t utf8_sequence(const std::string& text, std::size_t at, bool* well_formed) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  *well_formed = lead < 0x80;
  std::size_t length = 1;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  if (lead >= 0xE0 && lead <= 0xEF) length = 3;
  if (lead >= 0xF0 && lead <= 0xF4) length = 4;
  // The second byte's range excludes overlong forms, surrogates and code
  // points past U+10FFFF (RFC 3629's table).
  unsigned char low = 0x80, high = 0xBF;
  if (lead == 0xE0) low = 0xA0;
  if (lead == 0xED) high = 0x9F;
  if (lead == 0xF0) low = 0x90;
  if (lead == 0xF4) high = 0x8F;
  std::size_t i = 1;
  for (; i < length && at + i < text.size(); ++i) {
    if (byte(at + i) < low || byte(at + i) > high) break;
    low = 0x80, high = 0xBF;
  }
  if (length > 1) *well_formed = i == length;
  return i;
}

}  // namespace

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (std::size_t at = 0; at < text.size();) {
    const char c = text[at];
    bool well_formed = false;
    const std::size_t length = utf8_sequence(text, at, &well_formed);
    if (!well_formed) {  // JSON is UTF-8: stray bytes (a sampled byte token, a path) become U+FFFD
      quoted += "\\ufffd";
      at += length;
      continue;
    }
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted.append(text, at, length);
    }
    at += length;
  }
  return quoted + "\"";
}

std::ostream& text_stream(const io::Config& config, std::ostream& out) { return config.train.log_json ? std::cerr : out; }

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
  return config.device.peak_tflops > 0 ? config.device.peak_tflops
                                       : known_peak_tflops(device_description, config.device.matmul_precision);
}

ProgressLog::ProgressLog(const io::Config& config, std::ostream& out, bool reports, double peak_tflops)
    : config_(config), out_(out), reports_(reports), peak_flops_per_s_(peak_tflops * 1e12), null_(nullptr) {
  if (!reports_ || config.train.metrics_file.empty()) return;
  metrics_path_ = io::expand_run_name(config.train.metrics_file);
  const auto folder = std::filesystem::path(metrics_path_).parent_path();
  std::error_code ignored;
  if (!folder.empty()) std::filesystem::create_directories(folder, ignored);
  metrics_.open(metrics_path_, std::ios::app);
  if (!metrics_) {
    throw RunError("train.metrics_file: cannot write " + metrics_path_ + " (does its folder exist and allow writing?)");
  }
}

std::ostream& ProgressLog::text() {
  if (!reports_ || config_.train.quiet) return null_;
  return text_stream(config_, out_);
}

void ProgressLog::record(const std::string& json_line, bool on_stdout) {
  if (!reports_) return;
  if (metrics_.is_open()) {
    metrics_ << json_line << "\n";
    metrics_.flush();  // readable while the run goes on (tail -f, a plot)
  }
  if (on_stdout && config_.train.log_json) {
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
  const bool prints = r.step % config_.train.log_every_steps == 0 || r.step == config_.train.steps;
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
  if (!prints || config_.train.log_json || !reports_ || config_.train.quiet) return;
  std::string mfu_text = std::isfinite(mfu) ? " | MFU " + std::to_string(static_cast<int>(100 * mfu + 0.5)) + "%" : "";
  char line[320];
  std::snprintf(line, sizeof line,
                "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f GFLOPS%s | "
                "util %3.0f%% | ETA %s",
                r.step, config_.train.steps, interval_loss, r.learning_rate, r.grad_norm, 1e3 * r.step_s,
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

void ProgressLog::sample(int step, const std::string& sample_text, const std::vector<int>& tokens) {
  std::string ids;
  for (const int id : tokens) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  record("{\"event\": \"sample\", \"step\": " + std::to_string(step) + ", \"tokens\": [" + ids +
             "], \"text\": " + json_string(sample_text) + "}",
         true);
  text() << "sample at step " << step << ":\n" << sample_text << "\n";
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
