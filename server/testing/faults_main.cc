// ringkv-server-faults: ringkv-server (server/daemon.h) with a persist::FaultEnv under its data
// directory, for crash and disk-fault tests of a real process. Built for the tests only, never
// installed. Its flags are ringkv-server's and:
//   --fault-log-fail-after-bytes=N    a log write past N bytes of its file fails as a full disk
//   --fault-crash-in-snapshot=STEP    SIGKILL when a snapshot commit reaches STEP ("writing",
//                                     "renamed", "manifest", "cleanup"; persist/env.h)
//   --fault-power-loss-on-sigusr1     SIGUSR1 cuts every log back to its last fdatasync and
//                                     SIGKILLs the process (persist/testing/fault_env.h)
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "persist/testing/fault_env.h"
#include "server/daemon.h"

ABSL_FLAG(uint64_t, fault_log_fail_after_bytes, 0,
          "tests: a log write that would take its file past this many bytes writes what fits "
          "and fails with ENOSPC (0: never)");
ABSL_FLAG(std::string, fault_crash_in_snapshot, "",
          "tests: SIGKILL the process when a snapshot commit reaches this step (writing, "
          "renamed, manifest, cleanup)");
ABSL_FLAG(bool, fault_power_loss_on_sigusr1, false,
          "tests: SIGUSR1 drops every log's unsynced bytes and SIGKILLs the process");

int main(int argc, char** argv) {
  ringkv::ServerOptions options = ringkv::ParseServerFlags(argc, argv);
  // Never destroyed: the daemon exits the process.
  auto* env = new ringkv::persist::FaultEnv(
      {.fail_log_after_bytes = absl::GetFlag(FLAGS_fault_log_fail_after_bytes),
       .crash_at_step = absl::GetFlag(FLAGS_fault_crash_in_snapshot)});
  ringkv::DaemonHooks hooks{.env = env};
  if (absl::GetFlag(FLAGS_fault_power_loss_on_sigusr1))
    hooks.on_sigusr1 = [env] { env->PowerLoss(); };
  return ringkv::RunDaemon(std::move(options), hooks);
}
