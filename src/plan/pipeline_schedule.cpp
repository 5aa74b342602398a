#include "geotrain/plan/pipeline_schedule.hpp"

#include <algorithm>

#include "geotrain/common/enum_names.hpp"

namespace geotrain::plan {
namespace {

constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"}};

void append_forward(std::vector<Step>& program, int stage, int stages, int flush, int i) {
  if (stage > 0) program.push_back({StepKind::recv_activation, flush, i});
  program.push_back({StepKind::forward, flush, i});
  if (stage + 1 < stages) program.push_back({StepKind::send_activation, flush, i});
}

void append_backward(std::vector<Step>& program, int stage, int stages, int flush, int i) {
  if (stage + 1 < stages) program.push_back({StepKind::recv_gradient, flush, i});
  program.push_back({StepKind::backward, flush, i});
  if (stage > 0) program.push_back({StepKind::send_gradient, flush, i});
}

}  // namespace

std::vector<Step> pipeline_program(Schedule schedule, int stage, int stages, int m, int flushes) {
  std::vector<Step> program;
  for (int f = 0; f < flushes; ++f) {
    if (schedule == Schedule::gpipe) {
      for (int i = 0; i < m; ++i) append_forward(program, stage, stages, f, i);
      for (int i = 0; i < m; ++i) append_backward(program, stage, stages, f, i);
    } else {
      const int warmup = std::min(stages - 1 - stage, m);
      for (int i = 0; i < warmup; ++i) append_forward(program, stage, stages, f, i);
      for (int j = 0; j + warmup < m; ++j) {
        append_forward(program, stage, stages, f, warmup + j);
        append_backward(program, stage, stages, f, j);
      }
      for (int j = m - warmup; j < m; ++j) append_backward(program, stage, stages, f, j);
    }
  }
  return program;
}

std::vector<Step> flushless_program(int stage, int stages, int m, bool fresh, bool drains, int ahead) {
  std::vector<Step> program;
  const int warmup = (stages - 1 - stage) * (1 + ahead);
  if (fresh) {
    for (int i = 0; i < warmup; ++i) append_forward(program, stage, stages, 0, i);
  }
  for (int j = 0; j < m; ++j) {
    const int ahead = warmup + j;  // the forward that comes before backward j in the stream
    if (ahead < m) append_forward(program, stage, stages, 0, ahead);
    else if (!drains) append_forward(program, stage, stages, 1, ahead - m);
    append_backward(program, stage, stages, 0, j);
  }
  return program;
}

int flushless_slots(int stages, int ahead) { return (stages - 1) * (1 + ahead) + 1; }

std::string to_string(const Step& step) {
  static const char* names[] = {"F", "B", "recvA", "sendA", "recvG", "sendG"};
  std::string text(names[static_cast<int>(step.kind)]);
  text += std::to_string(step.micro_batch);
  if (step.flush > 0) {
    text += '@';
    text += std::to_string(step.flush);
  }
  return text;
}

int activation_slots(Schedule schedule, int micro_batches, int pipeline_stages) {
  // 1F1B: at stage s, forward i + p comes after backward i (the warm-up is
  // p - 1 - s forwards), so micro-batch i can reuse slot i mod p.
  return schedule == Schedule::gpipe ? micro_batches : std::min(micro_batches, pipeline_stages);
}

std::string to_string(Schedule s) { return name_in(kScheduleNames, s); }

bool parse_schedule(const std::string& text, Schedule* out) { return parse_name_in(kScheduleNames, text, out); }

}  // namespace geotrain::plan
