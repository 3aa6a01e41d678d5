// run_benchmark: the suite's main CLI. Checks the request (run_benchmark_plan), then runs
// --runs timed MLPerf runs into a results package and prints a summary.
//
//   run_benchmark --benchmark resnet50 --division closed --pod-size 1 --runs 5
//
// Exit codes: harness/exit_codes.h (also printed by --help and listed in README.md).
// --project-only: 0 the projection was printed (fitting or not: the verdict is in it), 1 refused.
#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <regex>

#include "datasets/fashion_mnist.h"
#include "harness/exit_codes.h"
#include "harness/full_scale_projection.h"
#include "harness/progress.h"
#include "harness/run_benchmark_plan.h"
#include "harness/stop_signals.h"
#include "harness/system_description.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/replication/mpi_link.h"
#include "ipu_backend/replication/replica_group.h"

namespace {

using namespace ipu::harness;
namespace fs = std::filesystem;

// SIGXFSZ ignored: a file size limit (a full quota) makes a write of the package fail with
// EFBIG, which the logger reports, instead of killing the process. SIGINT and SIGTERM:
// stop_signals.h (installed before anything is compiled or written).
void ignoreFileSizeLimitSignal() {
  ::signal(SIGXFSZ, SIG_IGN);
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

// The shell convention for "ended by signal N": 130 for SIGINT, 143 for SIGTERM.
int interruptedExitCode() {
  const int sig = stopSignal().load();
  return 128 + (sig != 0 ? sig : SIGINT);
}

// Holds an exclusive lock on the benchmark folder for the life of the process, so that a
// second run_benchmark writing the same package is refused instead of interleaving its
// result files with ours. flock on the folder itself: no lock file in the package.
class PackageLock {
 public:
  explicit PackageLock(const fs::path& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      throw std::runtime_error(
          fmt::format("cannot open '{}': {}", dir.string(), std::strerror(errno)));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK) {
        throw Refusal(fmt::format(
            "another run_benchmark is writing the package folder '{}' now; nothing was written "
            "(hint: wait for it to end, or pass another --results-dir or --system-name)",
            dir.string()));
      }
      throw std::runtime_error(
          fmt::format("cannot lock '{}': {}", dir.string(), std::strerror(err)));
    }
  }
  ~PackageLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  PackageLock(const PackageLock&) = delete;
  PackageLock& operator=(const PackageLock&) = delete;

 private:
  int fd_ = -1;
};

// Result files of an earlier invocation in the benchmark folder are moved, intact, to a sibling
// folder <benchmark>.replaced-<UTC time> (the package checker skips folders that are not a
// benchmark name), so that this invocation neither overwrites them nor leaves stale runs of a
// larger --runs in its package. Returns that folder, or an empty path when there was nothing.
fs::path moveEarlierResults(const BenchmarkPlan& plan) {
  const fs::path dir = benchmarkDir(plan.layout, plan.benchmark);
  const std::regex name(R"(result_\d+\.txt)");
  std::vector<fs::path> earlier;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (std::regex_match(f.path().filename().string(), name)) earlier.push_back(f.path());
  }
  if (earlier.empty()) return {};
  const std::string stamp = fmt::format("{:%Y%m%dT%H%M%SZ}", fmt::gmtime(std::time(nullptr)));
  fs::path to = dir.parent_path() / fmt::format("{}.replaced-{}", dir.filename().string(), stamp);
  for (int k = 2; fs::exists(to); ++k) {
    to = dir.parent_path() / fmt::format("{}.replaced-{}-{}", dir.filename().string(), stamp, k);
  }
  fs::create_directory(to);
  std::sort(earlier.begin(), earlier.end());
  for (const fs::path& f : earlier) fs::rename(f, to / f.filename());
  fmt::print(stderr,
             "run_benchmark: {} result file(s) of an earlier invocation in {} moved, unchanged, "
             "to {}\n",
             earlier.size(), dir.string(), to.string());
  return to;
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
}

std::string swNotes(const BenchmarkPlan& plan) {
  std::string notes = fmt::format("run_benchmark: {} engine, {} threads; model: {}.",
                                  plan.cli.engine, plan.cli.threads, plan.model_description);
  if (plan.cli.skip_memory_check) notes += " Tile-memory check SKIPPED (--skip-memory-check).";
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
          "--division", "--seed", "--engine", "--shard-optimizer-state", "--skip-memory-check",
          "--project-full-scale", "--results-dir", "--org", "--system-name", "--on-corrupt-image",
          "--loader-threads"}) {
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
    std::vector<fs::path> pages;
    const std::vector<FullScaleProjection> ps = projectFullScale(
        benchmark, sizes,
        o.report_dir.empty() ? ProgramReportSink{}
                             : reportWriter(o.report_dir, toString(benchmark) + "_full", &pages));
    for (const fs::path& page : pages) fmt::print(stderr, "report: {}\n", page.string());
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
                 "benchmark: resnet50, bert_large (mini scale; full scale needs pipelining), "
                 "efficientnet_b4 (our own rules; closed: B4, open: also G16 / group norm; mini "
                 "scale; full scale needs pipelining)")
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
                 fmt::format("data set folder (default for mini: {}; full: required). "
                             "bert_large: a folder of train/*.bertpak and eval/*.bertpak "
                             "(prepare_bert_data); default for mini: built from WordNet's "
                             "glosses into $IPU_BERT_DATA_CACHE or ~/.cache/ipu_mlperf/bert",
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
  app.add_option("--precision", o.precision,
                 "numeric precision: fp32, fp16 (f16 compute, f32 masters, dynamic loss "
                 "scaling), bf16 (emulator extension), 16.16 (IPU: f16 weights and partials, "
                 "stochastic rounding), 16.32 (f16 compute, f32 masters); default: the preset's")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "16.16", "16.32"}));
  app.add_option("--loss-scaling", o.loss_scaling,
                 "none | static:S | dynamic[:S0[:growth interval]]; default: the preset's, or "
                 "the --precision policy's");
  app.add_option("--ipus-per-replica", o.ipus_per_replica,
                 "IPUs one replica spans (pipelining); S > 1 needs --pipeline-splits or "
                 "--pipeline-auto")
      ->capture_default_str();
  app.add_option("--pipeline-splits", o.pipeline_splits,
                 "split points a,b,...: a stage ends after the last forward op whose output is "
                 "named a, or a/... or a_... (a layer prefix, e.g. stage2_unit1)")
      ->type_name("NAMES");
  app.add_option("--pipeline-stage-ipus", o.pipeline_stage_ipus,
                 "stage -> IPU map, e.g. 0,1,2,3,0 (several stages may share an IPU); default: "
                 "stage s on IPU s")
      ->type_name("IPUS");
  app.add_option("--pipeline-schedule", o.pipeline_schedule,
                 "grouped | interleaved | sequential (each has its rule on "
                 "gradient_accumulation_steps)")
      ->capture_default_str();
  app.add_flag("--pipeline-auto", o.pipeline_auto,
               "search the split points over --ipus-per-replica IPUs: every IPU fits, the "
               "slowest stage's modeled time is smallest");
  app.add_flag("--recompute", o.recompute,
               "recomputation checkpoints at the stage boundaries (with one IPU: the "
               "--pipeline-splits are only checkpoints; resnet50 without splits: Graphcore's "
               "six published checkpoints)");
  app.add_flag("--project-full-scale", o.project_full_scale,
               "after the runs, also print the modeled time-to-train at full scale on this pod "
               "size: the published configuration (full-scale preset), the full model compiled "
               "for IPU-Mk2 and priced by the cost model (ResNet-50: about 30 s more; BERT-Large, "
               "its pipeline's IPU programs: minutes and ~5 GB)");
  app.add_option("--report", o.report_dir,
                 "write a report page (HTML: per-tile memory, the fullest tiles' occupants, memory "
                 "over the program, the cost model's BSP timeline) of every program the fit check "
                 "compiles into DIR, with its view as JSON for `ipu_report compare`; also with "
                 "--project-only, and for a program that does not fit")
      ->type_name("DIR");
  app.add_flag("--project-only", o.project_only,
               "only the full-scale projection, no runs and no results package: the published "
               "configuration for --pod-size, one replica's programs compiled for IPU-Mk2, the "
               "tile-memory fit verdict, the modeled step time and its breakdown and the "
               "time-to-train (any pod size on one machine; ResNet-50 under a minute, BERT-Large "
               "minutes)");
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
  // Until the package is about to be written there is nothing to finish or keep: a signal ends
  // the process at once (the fit-check compile takes seconds to minutes).
  installStopSignals("run_benchmark: interrupted before any run; nothing written\n");
  ignoreFileSizeLimitSignal();
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
    if (rank == 0)
      fmt::print(stderr, "compiling {} (micro-batch {}) to check that it fits...\n",
                 plan.run.preset.name(), plan.run.trainer.batch);
    const double seconds = preflightCompile(plan);
    if (rank == 0)
      fmt::print(stderr, "{}: compiled in {:.1f} s\n",
                 o.skip_memory_check ? "memory check skipped" : "fits", seconds);
    if (rank == 0 && !plan.pipeline_description.empty())
      fmt::print(stderr, "pipeline placement ({} schedule, splits {}):\n{}",
                 ipu::pipeline::scheduleName(plan.run.trainer.pipeline.schedule),
                 fmt::join(plan.run.trainer.pipeline.splits, ","), plan.pipeline_description);
    else if (rank == 0 && plan.run.trainer.pipeline.recompute)
      fmt::print(stderr,
                 "recomputation checkpoints at the stage boundaries of splits {} (one IPU)\n",
                 fmt::join(plan.run.trainer.pipeline.splits, ","));
    if (rank == 0)
      for (const fs::path& page : plan.report_pages)
        fmt::print(stderr, "report: {}\n", page.string());
  } catch (const Refusal& e) {
    fmt::print(stderr, "run_benchmark: {}\n", e.what());
    return e.exitCode();
  } catch (const std::exception& e) {
    fmt::print(stderr, "run_benchmark: error before any run: {}\n", e.what());
    return kExitRefused;
  }
  // Every check passed: from here on the package is written (by rank 0), under a lock, and a
  // signal ends the run in progress with a complete log.
  recordStopSignals();
  fs::path systemJson;
  std::unique_ptr<PackageLock> lock;
  if (rank == 0) try {
      const fs::path dir = benchmarkDir(plan.layout, plan.benchmark);
      fs::create_directories(dir);
      lock = std::make_unique<PackageLock>(dir);
      moveEarlierResults(plan);
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
      // The other ranks would wait for rank 0 in the first collective: end the whole job.
      const auto* refusal = dynamic_cast<const Refusal*>(&e);
      const std::string message =
          refusal ? fmt::format("run_benchmark: {}", e.what())
                  : fmt::format("run_benchmark: cannot write the results package: {}", e.what());
      const int code = refusal ? refusal->exitCode() : kExitRefused;
      if (mpi) mpi->abortJob(message, code);
      fmt::print(stderr, "{}\n", message);
      return code;
    }

  ProgressLine progress(rank == 0 && ProgressLine::stderrIsTerminal());
  std::vector<RunOutcome> outcomes;
  for (int i = 0; i < o.runs && stopSignal().load() == 0; ++i) {
    fs::path log;
    try {
      log = resultFilePath(plan.layout, plan.benchmark, i);
    } catch (const std::exception& e) {
      fmt::print(stderr, "run_benchmark: cannot write the results package: {}\n", e.what());
      break;
    }
    RunOutcome r = executeRun(plan.run, log, i, o.runs, plan.seeds[i], stopSignal(), progress);
    if (r.status == RunStatus::kDiverged || r.status == RunStatus::kFailed) {
      fmt::print(stderr, "run {}: {}: {}\n", i, toString(r.status), r.message);
    }
    if (rank == 0)
      fmt::print(stderr, "run {}: {}, accuracy {}, {:.1f} s -> {}\n", i, toString(r.status),
                 r.accuracy ? fmt::format("{:.4f}", *r.accuracy) : std::string("none"),
                 r.minutes() * 60.0, log.string());
    if (rank == 0 && !o.report_dir.empty() && !plan.report_train_view.is_null()) try {
        const fs::path page = writeRunReport(
            fs::path(o.report_dir) / fmt::format("{}_{}_pod{}_run{}.html", toString(plan.benchmark),
                                                 o.scale, o.pod_size, i),
            plan.report_train_view, r, plan.modeled_step_seconds, plan.modeled_eval_seconds,
            "eval_accuracy");
        fmt::print(stderr, "report: {}\n", page.string());
      } catch (const std::exception& e) {
        fmt::print(stderr, "run_benchmark: no report page of run {}: {}\n", i, e.what());
      }
    const bool logLost = !r.log_complete;
    outcomes.push_back(std::move(r));
    if (logLost) {
      // The package cannot be written (full disk, quota): the next runs would fail the same
      // way, and this run's log is incomplete. The earlier result files are untouched.
      if (rank == 0)
        fmt::print(stderr,
                   "run_benchmark: the log of run {} could not be completed ({}); it is "
                   "incomplete and not a valid result; no further run starts\n",
                   i, log.string());
      break;
    }
  }
  if (rank == 0) printSummary(plan, outcomes, systemJson);
  if (rank == 0 && o.project_full_scale && stopSignal().load() == 0) {
    try {
      fmt::print("{}", projectFullScale(plan.benchmark, o.pod_size).describe());
    } catch (const std::exception& e) {
      fmt::print(stderr, "run_benchmark: no full-scale projection: {}\n", e.what());
    }
  }
  std::fflush(stdout);
  if (mpi) mpi->barrier("the end of the runs");
  if (stopSignal().load() != 0) return interruptedExitCode();
  return exitStatus(outcomes);
}
