// ringkv-server: the ringkv daemon. Serves ringkv.v1.KV, grpc.health.v1.Health and server
// reflection on --listen until SIGTERM or SIGINT, then drains (server/server.h) and exits 0.
// Exit status 2: a usage error, or the address cannot be listened on; 1: any other failure (a
// damaged or busy --data-dir, a snapshot at exit that failed). server/daemon.h has the steps.
#include "server/daemon.h"

int main(int argc, char** argv) {
  return ringkv::RunDaemon(ringkv::ParseServerFlags(argc, argv), {});
}
