// Pipeline x data parallel training in one process: pp * dp ranks as
// threads, each with its own backend and stage, pipelines through mailboxes,
// gradient sums through in-process groups. Ten AdamW steps must follow the
// loss trajectory of one rank that processes the same global batches.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/runtime/gradient_buckets.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain::runtime {
namespace {

using geotrain::ModelShape;
using model::Stage;
using model::StageSpec;

constexpr auto kDeadline = std::chrono::seconds(120);  // a schedule bug fails instead of hanging

// Point-to-point messages keyed by (replica, gradient?, boundary, micro-batch).
class Mailbox {
 public:
  void put(std::tuple<int, bool, int, int> key, const float* data, std::size_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_[key].assign(data, data + count);
    ready_.notify_all();
  }
  void take(std::tuple<int, bool, int, int> key, float* data, std::size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, kDeadline, [&] { return messages_.count(key) > 0; })) {
      throw std::runtime_error("mailbox: message never arrived");
    }
    std::copy(messages_[key].begin(), messages_[key].begin() + count, data);
    messages_.erase(key);
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::tuple<int, bool, int, int>, std::vector<float>> messages_;
};

class Links : public PipelineLinks {
 public:
  Links(Mailbox& box, int replica, int stage) : box_(box), r_(replica), s_(stage) {}
  void send_activation(const float* d, std::size_t n, int i) override { box_.put({r_, false, s_, i}, d, n); }
  void receive_activation(float* d, std::size_t n, int i) override { box_.take({r_, false, s_ - 1, i}, d, n); }
  void send_gradient(const float* d, std::size_t n, int i) override { box_.put({r_, true, s_ - 1, i}, d, n); }
  void receive_gradient(float* d, std::size_t n, int i) override { box_.take({r_, true, s_, i}, d, n); }

 private:
  Mailbox& box_;
  int r_, s_;
};

// Sums over named groups of ranks; contributions are added in member order,
// so the result does not depend on which thread arrives first.
class Groups {
 public:
  std::vector<double> sum(const std::string& group, int members, int member, std::vector<double> values) {
    std::unique_lock<std::mutex> lock(mutex_);
    Round& round = rounds_[group];
    ready_.wait_for(lock, kDeadline, [&] { return !round.complete; });  // previous round fully read
    if (round.parts.empty()) round.parts.resize(members);
    round.parts[member] = std::move(values);
    if (++round.arrived == members) {
      round.result.assign(round.parts[0].size(), 0.0);
      for (const auto& part : round.parts) {
        for (std::size_t i = 0; i < part.size(); ++i) round.result[i] += part[i];
      }
      round.complete = true;
      ready_.notify_all();
    } else if (!ready_.wait_for(lock, kDeadline, [&] { return round.complete; })) {
      throw std::runtime_error("group " + group + ": a member never arrived");
    }
    std::vector<double> result = round.result;
    if (++round.read == members) {
      round = Round{};
      ready_.notify_all();
    }
    return result;
  }

 private:
  struct Round {
    std::vector<std::vector<double>> parts;
    std::vector<double> result;
    int arrived = 0, read = 0;
    bool complete = false;
  };
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::string, Round> rounds_;
};

class GroupCollectives : public Collectives {
 public:
  GroupCollectives(Groups& groups, int replica, int stage, int pp, int dp)
      : g_(groups), r_(replica), s_(stage), pp_(pp), dp_(dp) {}
  void sum_data_parallel(float* data, std::size_t n) override {
    sum_into("dp" + std::to_string(s_), dp_, r_, data, n);
  }
  void sum_tied_embedding(float* data, std::size_t n) override {
    sum_into("tied" + std::to_string(r_), 2, s_ == 0 ? 0 : 1, data, n);
  }
  double sum_over_pipeline(double value) override {
    return g_.sum("pipe" + std::to_string(r_), pp_, s_, {value})[0];
  }
  double sum_data_parallel_value(double value) override {
    return g_.sum("dpv" + std::to_string(s_), dp_, r_, {value})[0];
  }

 private:
  void sum_into(const std::string& group, int members, int member, float* data, std::size_t n) {
    const auto total = g_.sum(group, members, member, std::vector<double>(data, data + n));
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(total[i]);
  }
  Groups& g_;
  int r_, s_, pp_, dp_;
};

const ModelShape kModel{.name = "parallel", .layers = 4, .hidden = 32, .heads = 2, .vocabulary = 64,
                       .sequence_length = 16};
constexpr int kB = 2, kMicroPerReplica = 2, kSteps = 10, kGlobalMicro = 4;  // dp * m = 4 micro-batches

using Batch = std::pair<std::vector<int>, std::vector<int>>;
std::vector<std::vector<Batch>> make_steps() {  // [step][global micro-batch]
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> token(0, kModel.vocabulary - 1);
  std::vector<std::vector<Batch>> steps(kSteps);
  for (auto& step : steps) {
    for (int i = 0; i < kGlobalMicro; ++i) {
      Batch b;
      for (int t = 0; t < kB * kModel.sequence_length; ++t) b.first.push_back(token(rng)), b.second.push_back(token(rng));
      step.push_back(b);
    }
  }
  return steps;
}

model::OptimizerSettings settings() {
  model::OptimizerSettings s;
  s.learning_rate = 3e-3;
  s.warmup_steps = 2;
  s.total_steps = kSteps;
  s.gradient_clip = 0.5;  // active: exercises the global norm across stages
  return s;
}

constexpr float kScale = 1.0f / (kGlobalMicro * kB * 16);

std::vector<double> single_rank_trajectory(const std::vector<std::vector<Batch>>& data) {
  auto backend = kernels::make_cpu_backend();
  Stage stage(kModel, StageSpec::whole(kModel), *backend, kB, 1);
  stage.initialize(9);
  model::AdamW optimizer(*backend, stage, settings());
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    stage.zero_grads();
    double loss = 0;
    for (const Batch& b : data[step]) {
      loss += stage.forward(0, b.first.data(), nullptr, b.second.data());
      stage.backward(0, nullptr, kScale);
    }
    optimizer.step(step, std::sqrt(optimizer.gradient_sum_of_squares()));
    losses.push_back(loss / kGlobalMicro);
  }
  return losses;
}

// `bucket_floats` > 0: the data-parallel sum in buckets started during the
// last backward (GradientBuckets); `early` then counts, over all ranks and
// steps, the buckets started before the backward ended.
std::vector<double> parallel_trajectory(const std::vector<std::vector<Batch>>& data, int pp, int dp,
                                        plan::Schedule schedule, std::size_t bucket_floats = 0,
                                        std::atomic<int>* early = nullptr) {
  const int m = kGlobalMicro / dp;
  Mailbox box;
  Groups groups;
  std::vector<std::vector<double>> replica_losses(dp, std::vector<double>(kSteps, 0.0));
  std::vector<std::string> errors(pp * dp);
  std::vector<std::thread> ranks;
  for (int r = 0; r < dp; ++r) {
    for (int s = 0; s < pp; ++s) {
      ranks.emplace_back([&, r, s] {
        try {
          auto backend = kernels::make_cpu_backend();
          const int per_stage = kModel.layers / pp;
          Stage stage(kModel, {s * per_stage, (s + 1) * per_stage, s == 0, s == pp - 1}, *backend, kB,
                      activation_slots(schedule, m, pp));
          stage.initialize(9);
          model::AdamW optimizer(*backend, stage, settings());
          PipelineStep pipeline(stage, *backend, schedule, s, pp, m);
          Links links(box, r, s);
          GroupCollectives collectives(groups, r, s, pp, dp);
          std::optional<GradientBuckets> buckets;
          if (bucket_floats > 0) {
            buckets.emplace(collectives, *backend, stage.parameter_count(), bucket_floats);
            pipeline.set_gradient_ready([&](std::size_t b, std::size_t e) { buckets->ready(stage.grads(), b, e); });
          }
          for (int step = 0; step < kSteps; ++step) {
            std::vector<MicroBatch> mine;  // replica r: its own slice of the global batch
            for (int i = 0; i < m; ++i) mine.push_back({data[step][r * m + i].first.data(), data[step][r * m + i].second.data()});
            stage.zero_grads();
            const double loss = pipeline.run(mine, links, kScale);
            const double norm = synchronize_gradients(stage, *backend, collectives, pp, dp, nullptr, nullptr,
                                                      buckets ? &*buckets : nullptr);
            if (buckets && early) *early += buckets->started_early();
            optimizer.step(step, norm);
            if (s == pp - 1) replica_losses[r][step] = loss;
          }
        } catch (const std::exception& e) {
          errors[r * pp + s] = e.what();
        }
      });
    }
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  std::vector<double> losses(kSteps, 0.0);
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < dp; ++r) losses[step] += replica_losses[r][step];
    losses[step] /= kGlobalMicro;
  }
  return losses;
}

struct Layout {
  int pp, dp;
  plan::Schedule schedule;
};

class ParallelTraining : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelTraining, FollowsTheSingleRankLossTrajectory) {
  const auto data = make_steps();
  const auto expected = single_rank_trajectory(data);
  const Layout layout = GetParam();
  const auto got = parallel_trajectory(data, layout.pp, layout.dp, layout.schedule);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(got[step], expected[step], 1e-5 * expected[step]) << "step " << step;
  }
  EXPECT_LT(expected.back(), expected.front());  // it trains at all
}

// Overlap changes when the sums start, not what they compute: the same
// losses, bit for bit, as the sum after the backward, on two layouts.
TEST(ParallelTraining, BucketedGradientSumsGiveTheSameBits) {
  const auto data = make_steps();
  for (const Layout layout : {Layout{2, 2, plan::Schedule::one_f_one_b}, Layout{1, 2, plan::Schedule::gpipe}}) {
    const auto plain = parallel_trajectory(data, layout.pp, layout.dp, layout.schedule);
    std::atomic<int> early{0};
    const auto bucketed = parallel_trajectory(data, layout.pp, layout.dp, layout.schedule, 3000, &early);
    for (int step = 0; step < kSteps; ++step) EXPECT_EQ(bucketed[step], plain[step]) << "pp" << layout.pp << " step " << step;
    EXPECT_GT(early.load(), kSteps * layout.pp * layout.dp) << "buckets must start during the backward";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelTraining,
                         ::testing::Values(Layout{1, 1, plan::Schedule::gpipe}, Layout{2, 1, plan::Schedule::gpipe},
                                           Layout{1, 2, plan::Schedule::one_f_one_b},
                                           Layout{2, 2, plan::Schedule::one_f_one_b},
                                           Layout{4, 2, plan::Schedule::gpipe}),
                         [](const auto& info) {
                           return "pp" + std::to_string(info.param.pp) + "_dp" + std::to_string(info.param.dp);
                         });

}  // namespace
}  // namespace geotrain::runtime
