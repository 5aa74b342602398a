// A rank's place in a job and what it talks through: the same types for a
// job of one rank (trivial links and collectives) and under MPI.
#pragma once
#include <string>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain::runtime {

// This rank's place in the job.
struct RankRole {
  int stage = 0, stages = 1;      // pipeline position
  int replica = 0, replicas = 1;  // data-parallel position
  int rank = 0;                   // in the job (MPI_COMM_WORLD), for timing records
  int job_index = 0;              // position among the job's ranks (ascending world ranks), for per-rank figures
  int job_ranks = 1;              // tensor_parallel x stages x replicas
  bool reports = true;            // prints progress (one rank per job)
  int site_replicas = 1;          // outer.sync_within_site: this stage's replicas in this rank's site
  model::StageSpec spec{};        // the layers it holds
  std::string plan_text;          // stored in checkpoints
};

// What the rank trains on and talks through.
struct RankConnections {
  kernels::Backend& backend;
  PipelineLinks& links;              // never used by a single-stage pipeline
  Collectives& collectives;
  CheckpointSink* checkpoints;       // null: no checkpoints
  Collectives* within_site = nullptr;  // outer.sync_within_site: data-parallel sums over the site's replicas
  model::TensorGroup* tensor_group = nullptr;  // role.spec.tensor_parallel > 1: the unit's other ranks
};

}  // namespace geotrain::runtime
