// The pipeline schedule: the fixed program of forward / backward / send /
// receive steps that each pipeline stage runs per training step (GPipe or
// 1F1B). One definition serves both sides: the runtime executes it
// (runtime/pipeline.hpp) and the simulator times it (plan/simulator.hpp), so
// a prediction is about the program that actually runs. Pure C++.
#pragma once
#include <string>
#include <vector>

namespace geotrain::plan {

enum class Schedule {
  gpipe,        // all forwards of a flush, then all backwards
  one_f_one_b,  // warm-up of D_pp - 1 - s forwards, then alternate, then cool-down
};

// One step of a device's program.
enum class StepKind { forward, backward, recv_activation, send_activation, recv_gradient, send_gradient };
struct Step {
  StepKind kind;
  int flush;        // gradient-accumulation step
  int micro_batch;  // within the flush
};

// The program of the device at `stage`: micro-batches 0..m-1 of flush 0, then
// flush 1, ... Receives come right before the compute that needs them,
// sends right after the compute that produced them.
std::vector<Step> pipeline_program(Schedule schedule, int stage, int pipeline_stages,
                                   int micro_batches_per_flush, int flushes);
std::string to_string(const Step& step);  // "F3", "B0", "recvA3", "sendG0"; flush > 0 adds "@1"

// Flushless 1F1B (PipeDream-2BW): the training run is one unbroken 1F1B
// stream of micro-batches, cut after each step's last backward; the slice
// of one step at `stage` is returned. Its backwards are all this step's;
// its forwards are this step's and, at stages before the last, the first
// p - 1 - stage of the next step's (flush = 1 marks them). `fresh`: the
// stream starts here (the warm-up forwards come first); `drains`: it stops
// after this step (no forward of the next step). `ahead`: a stage s hops
// before the last runs (1 + ahead)(p - 1 - s) forwards ahead of its
// backwards instead of 1F1B's p - 1 - s, so that a round trip over slow
// links finds work waiting (the round trip grows with the hops, so does
// the lead; the last stage's backward follows its forward at once). With
// ahead = 0, concatenated from a fresh step to a draining one, the slices
// are the 1F1B program of one flush of all their micro-batches. Needs
// m >= flushless_slots(p, ahead).
std::vector<Step> flushless_program(int stage, int pipeline_stages, int micro_batches, bool fresh, bool drains,
                                    int ahead = 0);

// Activation sets the first stage keeps alive in the flushless stream (the
// most of any stage): (1 + ahead)(p - 1) + 1.
int flushless_slots(int pipeline_stages, int ahead);

// Activation sets a stage keeps alive for `schedule` with m micro-batches per
// flush and p stages: GPipe all m; 1F1B at most p in flight.
int activation_slots(Schedule schedule, int micro_batches, int pipeline_stages);

std::string to_string(Schedule schedule);
bool parse_schedule(const std::string& text, Schedule* schedule);

}  // namespace geotrain::plan
