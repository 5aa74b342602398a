// geotrain sample: a checkpoint of any layout (its tensors are stored whole,
// by name) as one stage on one process, continuing a prompt token by token
// in the tokenizer the model was trained with.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/common/run_choices.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/runtime/sampler.hpp"

namespace geotrain::cli {

void add_sample_command(CLI::App& app, SampleCommandOptions& o) {
  CLI::App* sample = app.add_subcommand(
      "sample", "Generate text with a checkpoint's model on one process (any training layout): "
                "geotrain sample --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]");
  sample->add_option("--checkpoint", o.checkpoint, "checkpoint file of a geotrain run (HDF5)")->required();
  sample->add_option("--prompt", o.prompt, "text to continue, in the checkpoint's tokenizer (default: a line break)");
  sample->add_option("--tokens", o.tokens, "new tokens to generate (default 64)");
  sample->add_option("--temperature", o.temperature, "0: greedy (always the most likely token); default 1");
  sample->add_option("--top-k", o.top_k, "draw among the k most likely tokens only; 0 (default): all");
  sample->add_option("--seed", o.seed, "seed of the draws: the same seed gives the same text (default 1)");
  sample->add_option("--device", o.device, "auto (default), cpu or cuda");
}

namespace {

void check_options(const SampleCommandOptions& o, DeviceRequest* device) {
  auto fail = [](const std::string& option, const std::string& what) {
    throw InputError("command line: " + option + ": " + what);
  };
  if (o.tokens < 1) fail("--tokens", "must be >= 1, got " + std::to_string(o.tokens));
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    fail("--temperature", "must be a finite number >= 0 (0: greedy), got " + std::to_string(o.temperature));
  }
  if (o.top_k < 0) fail("--top-k", "must be >= 0 (0: all tokens), got " + std::to_string(o.top_k));
  if (!parse_device_request(o.device, device)) fail("--device", "must be one of auto, cpu, cuda, got '" + o.device + "'");
}

}  // namespace

int run_sample_command(const SampleCommandOptions& o) {
  DeviceRequest device = DeviceRequest::automatic;
  check_options(o, &device);
  const io::Checkpoint checkpoint = io::read_checkpoint(o.checkpoint);
  const auto tokenizer = io::tokenizer_from_text(checkpoint.tokenizer_text, o.checkpoint + ": attribute tokenizer");
  std::vector<int> prompt =
      runtime::encode_prompt(*tokenizer, o.prompt, checkpoint.model.vocabulary, "command line: --prompt");
  const std::unique_ptr<kernels::Backend> backend = kernels::make_backend(device);
  runtime::SamplingSettings settings;
  settings.tokens = o.tokens;
  settings.temperature = o.temperature;
  settings.top_k = o.top_k;
  settings.seed = o.seed;
  settings.token_limit = tokenizer->vocabulary();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> tokens = runtime::sample_checkpoint(checkpoint, o.checkpoint, *backend, prompt, settings);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << tokenizer->decode(tokens) << "\n" << std::flush;
  char line[256];
  std::snprintf(line, sizeof line, "geotrain sample: %d tokens after a prompt of %zu in %.2f s (%.1f tokens/s); %s\n",
                o.tokens, prompt.size(), seconds, o.tokens / seconds, backend->description().c_str());
  std::cerr << line;
  return 0;
}

}  // namespace geotrain::cli
