// R = 2 replicas of a 2-IPU pipeline (small CNN, grouped, G = 4) trained for two steps, the
// replicas in this process's threads or split over `mpirun -np 2` (MpiLink carries the ring's
// hops). Writes replica 0's trained weights to argv[1] (rank 0): the ctest pipeline_mpi compares
// the file of one process with that of two.
#include <omp.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/engine/pipeline_engine.h"
#include "ipu_backend/replication/mpi_link.h"
#include "models/small_cnn/small_cnn.h"

using namespace ipu;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pipeline_mpi_check <weights out>\n");
    return 2;
  }
  constexpr int R = 2, G = 4, kSteps = 2;
  omp_set_num_threads(1);  // kernels are built for the thread count they will run with
  constexpr i64 kBatch = 2;
  std::unique_ptr<replication::MpiLink> link;
  if (replication::MpiLink::launchedByMpirun()) link = std::make_unique<replication::MpiLink>();
  const int ranks = link ? link->ranks() : 1, rank = link ? link->rank() : 0;
  if (R % ranks != 0) {
    std::fprintf(stderr, "pipeline_mpi_check: %d ranks do not divide %d replicas\n", ranks, R);
    return 2;
  }
  const int local = R / ranks, first = rank * local;

  models::SmallCnnConfig c;
  c.conv1Channels = 4;
  c.conv2Channels = 8;
  SgdOptions sgd;
  sgd.momentum = 0.9;
  models::TaskGraph tg = models::buildSmallCnnTraining(c, kBatch, sgd);
  auto init = models::initSmallCnn(tg.graph, 11);
  pipeline::PipelineOptions o;
  o.splits = {"pool1"};
  o.accumulation = G;
  o.replicas = R;
  auto pe = std::make_shared<const pipeline::PipelinedExecutable>(
      pipeline::compilePipeline(tg.graph, Target::small(32, 4 << 20), o));

  replication::RingCollective ring(R, first, local, link.get());
  struct Replica {
    std::unique_ptr<pipeline::PipelineEngine> engine;
    std::vector<std::vector<float>> images;
    std::vector<std::vector<std::int32_t>> labels;
    std::vector<float> lr;
  };
  std::vector<Replica> replicas(static_cast<size_t>(local));
  for (int l = 0; l < local; ++l) {
    Replica& r = replicas[static_cast<size_t>(l)];
    r.engine = std::make_unique<pipeline::PipelineEngine>(pe, EngineMode::Fused,
                                                          ReplicaContext{first + l, &ring});
    for (const auto& [name, v] : init)
      if (pe->graph.find(name) >= 0) r.engine->writeTensor(name, v);
    std::mt19937 rng(static_cast<unsigned>(100 + first + l));  // replica r's own samples
    std::normal_distribution<float> nx(0.0f, 1.0f);
    std::uniform_int_distribution<int> ny(0, 9);
    for (int s = 0; s < kSteps; ++s) {
      r.images.emplace_back(static_cast<size_t>(G * kBatch * 28 * 28));
      for (float& v : r.images.back()) v = nx(rng);
      r.labels.emplace_back(static_cast<size_t>(G * kBatch));
      for (auto& v : r.labels.back()) v = ny(rng);
    }
    r.lr.assign(G, 0.05f);
    r.engine->connectInput("lr", r.lr.data());
  }
  for (int s = 0; s < kSteps; ++s) {
    std::vector<std::thread> threads;
    for (Replica& r : replicas)
      threads.emplace_back([&r, s] {
        // One OpenMP thread per replica, as ReplicaGroup runs them: kernels' reductions then
        // split the same way whatever launched the process (mpirun binds ranks to cores).
        omp_set_num_threads(1);
        r.engine->connectInput("images", r.images[static_cast<size_t>(s)].data());
        r.engine->connectInput("labels", r.labels[static_cast<size_t>(s)].data());
        r.engine->run();
      });
    for (auto& t : threads) t.join();
  }
  if (rank == 0) {
    std::ofstream out(argv[1], std::ios::binary);
    for (const Tensor& t : tg.graph.tensors())
      if (t.kind == TensorKind::Variable) {
        const std::vector<float> v = replicas[0].engine->readFloats(t.name);
        out.write(reinterpret_cast<const char*>(v.data()),
                  static_cast<std::streamsize>(v.size() * sizeof(float)));
      }
  }
  std::printf("rank %d of %d: replicas %d..%d trained\n", rank, ranks, first, first + local - 1);
  return 0;
}
