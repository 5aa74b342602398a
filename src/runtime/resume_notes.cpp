#include "resume_notes.hpp"

#include <toml++/toml.h>

namespace geotrain::runtime {

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

std::string schedule_change_note(const std::string& checkpoint_config, const io::Config& config) {
  if (config.optimizer.decay_steps > 0) return "";
  toml::table settings;
  try {
    settings = toml::parse(checkpoint_config);
  } catch (const toml::parse_error&) {
    return "";  // not a geotrain checkpoint's settings: nothing to compare
  }
  const std::int64_t steps = settings.at_path("train.steps").value_or<std::int64_t>(0);
  const std::int64_t decay = settings.at_path("optimizer.decay_steps").value_or<std::int64_t>(0);
  const std::int64_t was = decay > 0 ? decay : steps;
  if (was == 0 || was == config.train.steps) return "";
  return "note: the learning-rate schedule decayed over " + std::to_string(was) +
         " steps in the checkpoint's run and now over " + std::to_string(config.train.steps) +
         " (train.steps); --optimizer.decay_steps=" + std::to_string(was) + " keeps it\n";
}

}  // namespace geotrain::runtime
