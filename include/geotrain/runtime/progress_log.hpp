// What the reporting rank says while it trains, and the run's metrics file.
// Human text goes to the text stream (stdout; stderr with train.log_json, so
// that stdout carries JSON lines only). The loss on a progress line is the
// mean over the steps since the previous line, so that a spike between lines
// moves it. The metrics file (train.metrics_file, JSON lines) gets every
// step, every validation and the end of the run, as the run goes; its step
// records hold the step's own loss, and the printed ones also the interval's
// mean (interval_mean_loss over interval_steps).
#pragma once
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "geotrain/common/run_choices.hpp"
#include "geotrain/io/config.hpp"

namespace geotrain::runtime {

// Where a run's human text goes: `out`, or stderr with train.log_json (stdout
// then carries JSON lines only).
std::ostream& text_stream(const io::Config& config, std::ostream& out);

// `text` as a JSON string literal; bytes that are not UTF-8 become U+FFFD.
std::string json_string(const std::string& text);

// A known GPU's dense peak (vendor datasheets) for `precision`, from the
// backend's description ("CUDA, NVIDIA H100 80GB HBM3 (...)"); 0 = unknown.
double known_peak_tflops(const std::string& device_description, MatmulPrecision precision);
// device.peak_tflops where set, else known_peak_tflops; 0 = unknown (no MFU).
double peak_tflops(const io::Config& config, const std::string& device_description);

// One step, as the reporting rank measured it.
struct StepReport {
  int step = 0;  // 1-based
  double loss = 0, learning_rate = 0, grad_norm = 0, step_s = 0;
  double tokens_per_step = 0, model_flops_per_token = 0;
  double compute_s = 0;  // this rank's forward + backward in the step
  double eta_s = 0;
};

// The run's closing figures.
struct RunEnd {
  int steps = 0;
  double initial_validation_loss = 0, final_validation_loss = 0, tokens_per_s = 0;
  double utilisation_mean = 0, utilisation_min = 0;
  int utilisation_min_rank = 0;
  bool stopped = false;
  bool replicas_identical = true;
};

class ProgressLog {
 public:
  // `out`: the run's standard output; `reports`: this rank prints (one rank does).
  ProgressLog(const io::Config& config, std::ostream& out, bool reports, double peak_tflops);
  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;

  // Where notes, the plan and summaries go (a sink on a rank that does not report).
  std::ostream& text();
  void step(const StepReport& report);
  void validation(int step, double loss);
  void checkpoint(int step, const std::string& path);
  // A sample of the model's text after `step` (the prompt's ids included).
  void sample(int step, const std::string& text, const std::vector<int>& tokens);
  void end(const RunEnd& end);
  // The metrics file's path ("" = none).
  const std::string& metrics_path() const { return metrics_path_; }

 private:
  void record(const std::string& json_line, bool on_stdout);

  const io::Config& config_;
  std::ostream& out_;
  const bool reports_;
  const double peak_flops_per_s_;
  std::ofstream metrics_;
  std::string metrics_path_;
  std::ostream null_;
  // Since the last progress line.
  double loss_sum_ = 0;
  int loss_count_ = 0;
};

}  // namespace geotrain::runtime
