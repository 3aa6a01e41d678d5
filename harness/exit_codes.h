// run_benchmark's exit status: the one definition the CLI, its --help, README.md and the tests
// follow, so that a script can tell a run that missed its target from one that was aborted.
#pragma once

#include <csignal>
#include <string>

namespace ipu::harness {

enum ExitCode : int {
  kExitSuccess = 0,              // every run reached the target
  kExitRefused = 1,              // refused before running (request, config, data layout, host
                                 // memory, an error before the first run): nothing written
  kExitTargetNotReached = 2,     // the runs ended, one or more without reaching the target (epoch
                                 // budget spent, or training diverged); logs complete
  kExitDoesNotFit = 3,           // refused before running: the model does not fit in tile memory
  kExitAborted = 4,              // a run was aborted by an error (a corrupt image under
                                 // --on-corrupt-image fail, too many corrupt evaluation images,
                                 // an I/O error...); its log is complete and names the cause
  kExitSigint = 128 + SIGINT,    // 130: interrupted by SIGINT (Ctrl-C); logs complete
  kExitSigterm = 128 + SIGTERM,  // 143: interrupted by SIGTERM; logs complete
};

// The table --help and README.md print.
inline std::string exitCodeHelp() {
  return "Exit status:\n"
         "  0    success: every run reached the target accuracy\n"
         "  1    refused before running (bad flag, config, data layout, host memory): nothing "
         "written\n"
         "  2    target not reached: the runs ended (epoch budget spent, or training diverged)\n"
         "  3    refused before running: the model does not fit in IPU tile memory\n"
         "  4    aborted by an error (e.g. a corrupt image under --on-corrupt-image fail, too "
         "many\n"
         "       corrupt validation images); the log is complete and names the cause\n"
         "  130  interrupted by SIGINT; 143 interrupted by SIGTERM (logs complete)\n"
         "  --project-only: 0 the projection was printed (fitting or not), 1 refused\n";
}

}  // namespace ipu::harness
