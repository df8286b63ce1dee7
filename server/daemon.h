// The ringkv-server program in two steps, apart from main() so that a test-only build of the
// daemon (server/testing/faults_main.cc: ringkv-server-faults) runs the very same code with
// faults injected:
//   ParseServerFlags  the command line to ServerOptions; a usage error prints one line naming
//                     the flag and exits 2 (--help and --version exit 0);
//   RunDaemon         refuses an exposed address (exit 2), starts the Server, serves until
//                     SIGTERM or SIGINT (SIGHUP re-reads the token files), drains, and exits
//                     the process: 0 after a clean stop, 2 if the address cannot be listened
//                     on, 1 on any other failure. It never returns normally.
// Call once, from main.
//
//   int main(int argc, char** argv) {
//     return ringkv::RunDaemon(ringkv::ParseServerFlags(argc, argv), {});
//   }
#ifndef RINGKV_SERVER_DAEMON_H_
#define RINGKV_SERVER_DAEMON_H_

#include <functional>

#include "persist/env.h"
#include "server/server_options.h"

namespace ringkv {

// What a test build adds to the daemon; empty in ringkv-server.
struct DaemonHooks {
  // The logs' file I/O (ServerOptions::env); null: the system's.
  persist::Env* env = nullptr;
  // If set, SIGUSR1 calls it (a simulated power loss, which ends the process).
  std::function<void()> on_sigusr1 = nullptr;
};

ServerOptions ParseServerFlags(int argc, char** argv);
int RunDaemon(ServerOptions options, const DaemonHooks& hooks);

}  // namespace ringkv

#endif  // RINGKV_SERVER_DAEMON_H_
