// What a resumed run changes against its checkpoint's run, said once at the
// start ("" when nothing changes).
#pragma once
#include <cstdint>
#include <string>

#include "geotrain/io/config.hpp"

namespace geotrain::runtime {

// Another number of replicas changes the sequences per step, hence the loss
// curve, unless the micro-batches per replica change with it: which setting
// keeps the checkpoint's batch.
std::string batch_change_note(std::int64_t checkpoint_batch, int micro_batch, int micro_batches, int replicas);
// Another train.steps stretches the cosine schedule unless
// optimizer.decay_steps pins it. `checkpoint_config` is the checkpoint's
// settings as io::describe() wrote them (TOML).
std::string schedule_change_note(const std::string& checkpoint_config, const io::Config& config);

}  // namespace geotrain::runtime
