// ParseCommandLineOrExit: Abseil flag parsing with the conventions every ringkv program shares.
// Flag names may be written with dashes or underscores (--max-key-bytes is --max_key_bytes),
// --flagfile=PATH reads more flags from PATH, one "--name=value" a line ("#" starts a comment),
// and any usage error (an unknown flag, a value that does not parse) prints one line naming
// the flag and exits with status 2, where Abseil alone would exit with 1. --help prints the
// usage message and the program's own flags and exits 0; --version prints the program's name,
// ringkv's release and the commit it was built from, and exits 0; --helpfull and friends are
// Abseil's.
// Returns the positional arguments, argv[0] first; a negative number ("-5") is one of them, not
// a flag. Call once, from main.
//
//   std::vector<char*> args = ParseCommandLineOrExit(argc, argv);
#ifndef RINGKV_BASE_COMMAND_LINE_H_
#define RINGKV_BASE_COMMAND_LINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringkv {

std::vector<char*> ParseCommandLineOrExit(int argc, char** argv);

// For a usage error found after parsing (a flag value out of range): prints
// "<program>: <message> (see --help)" on stderr, as the parser does, and exits with status 2.
[[noreturn]] void ExitUsageError(const char* argv0, const std::string& message);

// A size in bytes: a number, optionally with a unit, case-insensitive: plain bytes ("1048576"
// or "512B"), KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB or K/M/G/T (powers of 1024).
// "1.5GiB" works; the result is rounded down to whole bytes. Nullopt if it does not parse or
// is past 2^63.
std::optional<uint64_t> ParseByteSize(std::string_view text);

}  // namespace ringkv

#endif  // RINGKV_BASE_COMMAND_LINE_H_
