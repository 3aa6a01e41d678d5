// run_benchmark: the suite's main CLI. Checks the request (run_benchmark_plan), then runs
// --runs timed MLPerf runs into a results package and prints a summary.
//
//   run_benchmark --benchmark resnet50 --division closed --pod-size 1 --runs 5
//
// Exit codes: harness/exit_codes.h (also printed by --help and listed in README.md).
// --project-only: 0 the projection was printed (fitting or not: the verdict is in it), 1 refused.
#include <fmt/format.h>
#include <signal.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <regex>

#include "datasets/fashion_mnist.h"
#include "harness/exit_codes.h"
#include "harness/full_scale_projection.h"
#include "harness/progress.h"
#include "harness/run_benchmark_plan.h"
#include "harness/system_description.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/replication/mpi_link.h"
#include "ipu_backend/replication/replica_group.h"

namespace {

using namespace ipu::harness;
namespace fs = std::filesystem;

std::atomic<int> gInterrupted{0};  // the signal received, 0 while none

// Records the signal the run loop polls between steps; a second one kills at once.
void onSignal(int sig) {
  gInterrupted.store(sig);
  ::signal(sig, SIG_DFL);
}

void installSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR instead of waiting
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// The process's exit status over its runs (exit_codes.h): an error outranks a missed target.
int exitStatus(const std::vector<RunOutcome>& runs) {
  bool missed = false;
  for (const RunOutcome& r : runs) {
    if (r.status == RunStatus::kFailed) return kExitAborted;
    missed = missed || !r.success();
  }
  return missed ? kExitTargetNotReached : kExitSuccess;
}

// Result files of an earlier, larger --runs that this invocation does not overwrite: the
// package checker wants exactly 5 (ResNet) per benchmark folder.
void warnStaleResults(const BenchmarkPlan& plan) {
  const fs::path dir = benchmarkDir(plan.layout, plan.benchmark);
  std::error_code ec;
  const std::regex name(R"(result_(\d+)\.txt)");
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string base = f.path().filename().string();
    if (std::regex_match(base, m, name) && std::stoi(m[1]) >= plan.cli.runs) {
      fmt::print(stderr, "warning: {} is from an earlier invocation and stays in the package\n",
                 f.path().string());
    }
  }
}

// Olympic mean (MLPerf scoring): drop the fastest and the slowest; a run that did not reach
// the target counts as the slowest, and more than one such run invalidates the score.
std::string olympicScore(const std::vector<RunOutcome>& runs) {
  if (runs.size() < 3) return "";
  std::vector<double> t;
  int failed = 0;
  for (const RunOutcome& r : runs) {
    if (r.success()) {
      t.push_back(r.minutes());
    } else {
      ++failed;
      t.push_back(std::numeric_limits<double>::infinity());
    }
  }
  if (failed > 1) {
    return fmt::format("score: none ({} of {} runs did not reach the target; at most 1 may)",
                       failed, runs.size());
  }
  std::sort(t.begin(), t.end());
  double sum = 0;
  for (std::size_t i = 1; i + 1 < t.size(); ++i) sum += t[i];
  return fmt::format("score (olympic mean of {} runs, host wall clock): {:.4f} min", runs.size(),
                     sum / static_cast<double>(t.size() - 2));
}

void printSummary(const BenchmarkPlan& plan, const std::vector<RunOutcome>& runs,
                  const fs::path& systemJson) {
  fmt::print("\n== run_benchmark summary: {} {} {}, {} ({}), {} run(s) ==\n",
             toString(plan.benchmark), toString(plan.scale), toString(plan.division),
             plan.run.preset.name(), plan.layout.system, runs.size());
  fmt::print("model: {}\n", plan.model_description);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunOutcome& r = runs[i];
    fmt::print(
        "run {}: {}\n  seed {}, epochs {}, final accuracy {}, time to train {:.3f} min "
        "({:.1f} s host wall clock; init {:.1f} s)\n  log {}\n",
        i, toString(r.status), r.seed, r.epochs,
        r.accuracy ? fmt::format("{:.4f}", *r.accuracy) : std::string("none"), r.minutes(),
        r.minutes() * 60.0, r.init_seconds, r.log.string());
    if (!r.message.empty() && !r.success()) fmt::print("  reason: {}\n", r.message);
  }
  const std::string score = olympicScore(runs);
  if (!score.empty()) fmt::print("{}\n", score);
  // Modeled IPU time of what each run did: its training steps and evaluation batches priced by
  // the cost model on the compiled programs (host time between them is not modeled).
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunOutcome& r = runs[i];
    const double trainS = static_cast<double>(r.train_steps) * plan.modeled_step_seconds;
    const double evalS = static_cast<double>(r.eval_runs) * plan.modeled_eval_seconds;
    fmt::print(
        "modeled IPU time, run {}: {:.3f} s ({} steps x {:.3f} ms + {} evaluation batches x "
        "{:.3f} ms; cost model of the programs as compiled, for {})\n",
        i, trainS + evalS, r.train_steps, plan.modeled_step_seconds * 1e3, r.eval_runs,
        plan.modeled_eval_seconds * 1e3, plan.fit_check.target.name);
  }
  fmt::print("system description: {}\n", systemJson.string());
  if (plan.stand_in) {
    fmt::print("WARNING: these runs used the TEMPORARY small-CNN stand-in, not ResNet-50\n");
  }
}

std::string swNotes(const BenchmarkPlan& plan) {
  std::string notes = fmt::format("run_benchmark: {} engine, {} threads; model: {}.",
                                  plan.cli.engine, plan.cli.threads, plan.model_description);
  if (plan.cli.skip_memory_check) notes += " Tile-memory check SKIPPED (--skip-memory-check).";
  if (plan.stand_in) notes += " TEMPORARY small-CNN stand-in for ResNet-50 (--model-stand-in).";
  return notes;
}

// --project-only: the projection without runs. Options that would change or need a run are
// refused rather than silently ignored: the projection is of the published configuration.
int projectOnly(const CLI::App& app, const CliOptions& o) {
  try {
    if (!o.project_only)
      throw Refusal("--json and --all-pod-sizes apply to --project-only (add it)");
    for (const char* name :
         {"--runs", "--config", "--precision", "--loss-scaling", "--max-epochs", "--data-dir",
          "--division", "--seed", "--engine", "--shard-optimizer-state", "--model-stand-in",
          "--skip-memory-check", "--project-full-scale", "--results-dir", "--org", "--system-name",
          "--on-corrupt-image", "--loader-threads"}) {
      if (app.count(name) > 0)
        throw Refusal(fmt::format(
            "{} does not apply to --project-only, which projects the published full-scale "
            "configuration without running it (drop {}; run without --project-only to use it)",
            name, name));
    }
    if (o.scale != "full" && app.count("--scale") > 0)
      throw Refusal("--scale " + o.scale +
                    ": --project-only projects the full scale (drop --scale)");
    if (o.all_pod_sizes && app.count("--pod-size") > 0)
      throw Refusal("--all-pod-sizes projects every pod size: drop --pod-size");
    Benchmark benchmark;
    try {
      benchmark = parseBenchmark(o.benchmark);
    } catch (const std::invalid_argument& e) {
      throw Refusal(e.what());
    }
    const std::vector<int> sizes =
        o.all_pod_sizes ? presetPodSizes(benchmark, Scale::kFull) : std::vector<int>{o.pod_size};
    ipu::kernels::fused::setNumThreads(o.threads);
    std::FILE* text = o.json ? stderr : stdout;
    fmt::print(stderr, "projecting {} at full scale on {} pod size(s): compiling for IPU-Mk2...\n",
               o.benchmark, sizes.size());
    const std::vector<FullScaleProjection> ps = projectFullScale(benchmark, sizes);
    Json all = Json::array();
    for (const FullScaleProjection& p : ps) {
      fmt::print(text, "{}", p.describe());
      all.push_back(p.json());
    }
    if (o.json) fmt::print("{}\n", (o.all_pod_sizes ? all : all[0]).dump(1));
    std::fflush(stdout);
    return kExitSuccess;
  } catch (const Refusal& e) {
    fmt::print(stderr, "run_benchmark: {}\n", e.what());
    return e.exitCode();
  } catch (const std::exception& e) {
    fmt::print(stderr, "run_benchmark: projection failed: {}\n", e.what());
    return kExitRefused;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CliOptions o;
  CLI::App app{
      "run_benchmark: MLPerf-style training benchmarks on an emulated Graphcore IPU pod.\n"
      "Writes <results-dir>/<org>/results/<system>/<benchmark>/result_<i>.txt and\n"
      "<results-dir>/<org>/systems/<system>.json (the MLPerf submission layout)."};
  app.add_option("--benchmark", o.benchmark,
                 "benchmark: resnet50 (bert_large, efficientnet_b4: registered, not implemented "
                 "yet)")
      ->check(CLI::IsMember({"resnet50", "bert_large", "efficientnet_b4"}))
      ->capture_default_str();
  app.add_option("--division", o.division,
                 "MLPerf division: closed (reference model and rules) or open")
      ->check(CLI::IsMember({"closed", "open"}))
      ->capture_default_str();
  app.add_option("--pod-size", o.pod_size,
                 "IPUs in the emulated pod: the preset's replicas run as threads of this process, "
                 "or split over the processes of `mpirun -np P` (P must divide the replicas)")
      ->check(CLI::IsMember({1, 4, 16, 64, 128, 256}))
      ->capture_default_str();
  app.add_flag("--shard-optimizer-state", o.shard_optimizer_state,
               "replicated tensor sharding: each replica keeps 1/R of the momentum and updates "
               "1/R of the weights (all-gathered)");
  app.add_option("--scale", o.scale,
                 "mini: Fashion-MNIST and CPU-sized models; full: ImageNet at --data-dir "
                 "(train/<synset>/*.JPEG, val/<synset>/*.JPEG) and ResNet-50 at 224x224 with the "
                 "published pod configuration")
      ->check(CLI::IsMember({"mini", "full"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 fmt::format("data set folder (default for mini: {}; full: required)",
                             datasets::kDefaultFashionMnistDir));
  app.add_option("--on-corrupt-image", o.on_corrupt_image,
                 "full scale: a corrupt or truncated image stops the run (fail), or is reported "
                 "by name and skipped (skip): in training replaced by the next image of the "
                 "epoch; in evaluation not scored (accuracy over the other images), the run "
                 "aborted if more than max_corrupt_eval_fraction (--config) are corrupt")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  app.add_option("--loader-threads", o.loader_threads,
                 "full scale: JPEG decoding and augmentation threads (0: as --threads)")
      ->capture_default_str();
  app.add_option("--results-dir", o.results_dir, "root of the results package")
      ->capture_default_str();
  app.add_option("--org", o.org, "submitter (submission_org and the package's top folder)")
      ->capture_default_str();
  app.add_option("--system-name", o.system_name,
                 "system id: the results/<system> folder, systems/<system>.json and "
                 "submission_platform (default: ipu-pod<N>-emulated)");
  app.add_option("--runs", o.runs, "timed runs (MLPerf ResNet package: 5)")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of run 0; run i uses seed + i")->capture_default_str();
  app.add_option("--config", o.config,
                 "JSON file of hyperparameters overriding the preset (unknown keys refused); "
                 "also mini_train_samples, mini_eval_samples, mini_target_accuracy, "
                 "mini_augment_flip, mini_augment_padding, "
                 "eval_period, eval_offset, max_corrupt_eval_fraction");
  app.add_option("--max-epochs", o.max_epochs, "epoch budget (0: the preset's epochs)")
      ->capture_default_str();
  app.add_option("--engine", o.engine, "engine mode: fused (fast) or tile (literal tile semantics)")
      ->check(CLI::IsMember({"fused", "tile"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads of the engine")->capture_default_str();
  app.add_flag("--skip-memory-check", o.skip_memory_check,
               "run even when the model does not fit in tile memory (backend development; "
               "noted in the system description)");
  app.add_flag("--model-stand-in", o.model_stand_in,
               "TEMPORARY: run the small CNN in ResNet-50's place (resnet50 mini) until "
               "models/resnet50 trains at a usable speed; marked in the output and the system "
               "description");
  app.add_option("--precision", o.precision,
                 "numeric precision: fp32, fp16 (f16 compute, f32 masters, dynamic loss "
                 "scaling), bf16 (emulator extension), 16.16 (IPU: f16 weights and partials, "
                 "stochastic rounding), 16.32 (f16 compute, f32 masters); default: the preset's")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "16.16", "16.32"}));
  app.add_option("--loss-scaling", o.loss_scaling,
                 "none | static:S | dynamic[:S0[:growth interval]]; default: the preset's, or "
                 "the --precision policy's");
  app.add_flag("--project-full-scale", o.project_full_scale,
               "after the runs, also print the modeled time-to-train at full scale on this pod "
               "size: the published configuration (full-scale preset), full ResNet-50 compiled "
               "for IPU-Mk2 and priced by the cost model (about 30 s more)");
  app.add_flag("--project-only", o.project_only,
               "only the full-scale projection, no runs and no results package: the published "
               "configuration for --pod-size, one replica's programs compiled for IPU-Mk2, the "
               "tile-memory fit verdict, the modeled step time and its breakdown and the "
               "time-to-train (any pod size on one machine, under a minute)");
  app.add_flag("--all-pod-sizes", o.all_pod_sizes,
               "with --project-only: every pod size the benchmark has a full-scale preset for "
               "(programs shared by several sizes are priced once)");
  app.add_flag("--json", o.json,
               "with --project-only: the projection as JSON on stdout (an object, or an array "
               "with --all-pod-sizes); the text goes to stderr");
  app.footer(exitCodeHelp());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error
    return rc == 0 ? kExitSuccess : kExitRefused;
  }
  if (o.project_only || o.all_pod_sizes || o.json) return projectOnly(app, o);

  // Under mpirun every process runs this same main; rank 0 alone writes the package and prints.
  std::unique_ptr<ipu::replication::MpiLink> mpi;
  if (ipu::replication::MpiLink::launchedByMpirun())
    mpi = std::make_unique<ipu::replication::MpiLink>();
  const int rank = mpi ? mpi->rank() : 0;
  BenchmarkPlan plan;
  try {
    plan = makePlan(o);
    if (mpi) {  // an uneven split is refused before anything is compiled
      ipu::replication::ReplicaGroupOptions split;
      split.replicas = plan.run.trainer.replicas;
      split.link = mpi.get();
      ipu::replication::localReplicasOf(split);
    }
    plan.run.trainer.link = plan.fit_check.link = mpi.get();
    plan.run.rank = rank;
    ipu::kernels::fused::setNumThreads(o.threads);
    if (plan.stand_in && rank == 0) {
      fmt::print(stderr,
                 "WARNING: --model-stand-in: the small CNN runs in place of ResNet-50; these "
                 "results are NOT ResNet-50 results\n");
    }
    if (rank == 0)
      fmt::print(stderr, "compiling {} (micro-batch {}) to check that it fits...\n",
                 plan.run.preset.name(), plan.run.trainer.batch);
    const double seconds = preflightCompile(plan);
    if (rank == 0) fmt::print(stderr, "fits: compiled in {:.1f} s\n", seconds);
  } catch (const Refusal& e) {
    fmt::print(stderr, "run_benchmark: {}\n", e.what());
    return e.exitCode();
  } catch (const std::exception& e) {
    fmt::print(stderr, "run_benchmark: error before any run: {}\n", e.what());
    return kExitRefused;
  }

  // Every check passed: from here on the package is written (by rank 0).
  fs::path systemJson;
  if (rank == 0) try {
      fs::create_directories(benchmarkDir(plan.layout, plan.benchmark));
      warnStaleResults(plan);
      SystemDescriptionOptions so;
      so.submitter = o.org;
      so.division = toString(plan.division);
      so.status = systemDescriptionStatus(plan.run.submission.status);
      so.pod = podTopology(o.pod_size);
      so.system_name = fmt::format("{} (emulated on 1 CPU host{})", so.pod.name,
                                   mpi ? fmt::format(", {} MPI processes", mpi->ranks()) : "");
      so.results_dir = o.results_dir;
      so.sw_notes = swNotes(plan);
      systemJson = writeSystemDescription(plan.layout, buildSystemDescription(so));
    } catch (const std::exception& e) {
      fmt::print(stderr, "run_benchmark: cannot write the results package: {}\n", e.what());
      return kExitRefused;
    }

  installSignalHandlers();
  ProgressLine progress(rank == 0 && ProgressLine::stderrIsTerminal());
  std::vector<RunOutcome> outcomes;
  for (int i = 0; i < o.runs; ++i) {
    const fs::path log = resultFilePath(plan.layout, plan.benchmark, i);
    RunOutcome r = executeRun(plan.run, log, i, o.runs, plan.seeds[i], gInterrupted, progress);
    if (r.status == RunStatus::kDiverged || r.status == RunStatus::kFailed) {
      fmt::print(stderr, "run {}: {}: {}\n", i, toString(r.status), r.message);
    }
    if (rank == 0)
      fmt::print(stderr, "run {}: {}, accuracy {}, {:.1f} s -> {}\n", i, toString(r.status),
                 r.accuracy ? fmt::format("{:.4f}", *r.accuracy) : std::string("none"),
                 r.minutes() * 60.0, log.string());
    outcomes.push_back(std::move(r));
    if (gInterrupted.load()) break;
  }
  if (rank == 0) printSummary(plan, outcomes, systemJson);
  if (rank == 0 && o.project_full_scale) {
    try {
      fmt::print("{}", projectFullScale(plan.benchmark, o.pod_size).describe());
    } catch (const std::exception& e) {
      fmt::print(stderr, "run_benchmark: no full-scale projection: {}\n", e.what());
    }
  }
  std::fflush(stdout);
  if (mpi) mpi->barrier("the end of the runs");
  if (const int sig = gInterrupted.load()) return 128 + sig;  // kExitSigint, kExitSigterm
  return exitStatus(outcomes);
}
