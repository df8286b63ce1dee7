// ExitWithoutTeardown: ends a process that has run gRPC or OpenSSL threads, skipping the exit
// handlers and static destructors, after a leak check in sanitizer builds.
//
// Why: OpenSSL's atexit handler (OPENSSL_cleanup) deletes its per-thread keys and assumes every
// thread that used it has stopped. gRPC's threads have not: dropping the last channel or server
// starts grpc_shutdown on a thread of its own, which winds down executor and event-engine
// threads while main's exit handlers run. A thread that ends after the cleanup never frees its
// OpenSSL error state, and LeakSanitizer, run last, reports it (904 bytes, from CRYPTO_zalloc;
// seen once in CI in ringkv-loadgen over TLS). Tearing gRPC down properly first can block for
// seconds (server/daemon.cc). Everything a program must keep is written before this is called:
// stdio is flushed here, files are closed by their owners.
//
//   int main(int argc, char** argv) { ringkv::ExitWithoutTeardown(Main(argc, argv)); }
#ifndef RINGKV_BASE_EXIT_H_
#define RINGKV_BASE_EXIT_H_

#include <cstdio>
#include <cstdlib>

// LeakSanitizer's entry point, present only in sanitizer builds.
extern "C" void __lsan_do_leak_check()  // NOLINT(readability-identifier-naming)
    __attribute__((weak));

namespace ringkv {

// Any thread, once: flushes stdio, runs the leak check a sanitizer build would run at exit (every
// thread still running holds what it points to, so nothing live is reported), and exits with
// `status` at once.
[[noreturn]] inline void ExitWithoutTeardown(int status) {
  std::fflush(nullptr);
  if (&__lsan_do_leak_check != nullptr) __lsan_do_leak_check();
  std::_Exit(status);
}

}  // namespace ringkv

#endif  // RINGKV_BASE_EXIT_H_
