// Model files (inputs/models/*.toml): the GPT shape in [model], optionally the
// device speed in [device] and the batch in [batch], used by `train` and
// `simulate`. Unknown keys are fatal.
#pragma once
#include <optional>
#include <string>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/plan/workload.hpp"

namespace geotrain::io {

struct DeviceSpeed {
  double peak_tflops = 125.0;  // V100 fp16 tensor cores
  double efficiency = 0.34;    // achieved / peak: plan::kCalibratedEfficiency (src/plan/README.md, Simulator)
};

struct BatchShape {
  int global_batch_sequences = 1024;
  int micro_batch_sequences = 1;
};

struct ModelFile {
  std::string path;
  ModelShape model;
  std::optional<DeviceSpeed> device;
  std::optional<BatchShape> batch;
};

// Throws InputError "<path>: <table.key>: <what>" for a missing file, a
// syntax error, an unknown key, a wrong type or a value out of range
// (non-positive sizes, hidden not divisible by heads).
ModelFile load_model_file(const std::string& path);

// The file's model as `plan` and `simulate` plan it: its [batch] (default
// 1024 sequences) and the cost model's default wire sizes (fp16
// activations, fp32 gradients).
plan::TrainingShape training_shape(const ModelFile& file);

}  // namespace geotrain::io
