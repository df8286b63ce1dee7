#include "base/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flag_file.h"
#include "base/version.h"

namespace ringkv {
namespace {

bool IsAbseilBuiltin(std::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
         name == "version" || name == "only_check_args" || name == "helpon" ||
         name == "helpmatch" || name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
         name == "undefok";
}

// Abseil's flags that take a value, which "--flag value" gives in the next argument.
bool AbseilBuiltinTakesValue(std::string_view name) {
  return name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok" ||
         name == "helpon" || name == "helpmatch";
}

// "-5", "-0.5": an operand (a negative delta), not a flag.
bool IsNegativeNumber(std::string_view arg) {
  return arg.size() >= 2 && arg[0] == '-' && arg[1] >= '0' && arg[1] <= '9';
}

// --help: the usage message and the program's own flags (not Abseil's), sorted, then exit 0.
[[noreturn]] void PrintHelp(const char* program) {
  std::string name = program;
  if (size_t slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  std::printf("%s: %s\n\nFlags (write - or _ in names):\n", name.c_str(),
              std::string(absl::ProgramUsageMessage()).c_str());
  std::vector<std::pair<std::string, absl::CommandLineFlag*>> flags;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find("absl/") != std::string::npos) continue;
    flags.emplace_back(std::string(flag_name), flag);
  }
  std::sort(flags.begin(), flags.end());
  for (const auto& [flag_name, flag] : flags) {
    std::printf("  --%s  %s\n      default: %s\n", flag_name.c_str(), flag->Help().c_str(),
                flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str());
  }
  std::exit(0);
}

// Replaces each --flagfile=PATH (or "--flagfile PATH") in args[1..] by the flags PATH holds:
// one per line, "--name=value" (the value is the rest of the line), blank lines and lines
// starting with '#' skipped. A file may name another, 8 deep at most. Usage errors exit 2.
void ExpandFlagFiles(const char* program, std::vector<std::string>* args, int depth) {
  for (size_t i = 1; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    if (arg == "--") return;
    std::string path;
    if (arg == "--flagfile" || arg == "-flagfile") {
      if (i + 1 == args->size()) ExitUsageError(program, "flag --flagfile needs a value");
      path = (*args)[i + 1];
      args->erase(args->begin() + static_cast<ptrdiff_t>(i));
    } else if (arg.starts_with("--flagfile=") || arg.starts_with("-flagfile=")) {
      path = arg.substr(arg.find('=') + 1);
    } else {
      continue;
    }
    if (depth >= 8) ExitUsageError(program, "--flagfile " + path + ": flag files nest too deep");
    std::string text;
    if (absl::Status read = ReadFlagFile("--flagfile", path, &text); !read.ok()) {
      ExitUsageError(program, std::string(read.message()));
    }
    std::vector<std::string> flags = {(*args)[0]};
    int line_number = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++line_number;
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line.front() == '#') continue;
      if (line.front() != '-' || line == "--") {
        ExitUsageError(program, absl::StrCat("--flagfile ", path, ", line ", line_number,
                                             ": expected --flag=value"));
      }
      flags.emplace_back(line);
    }
    ExpandFlagFiles(program, &flags, depth + 1);
    args->erase(args->begin() + static_cast<ptrdiff_t>(i));
    args->insert(args->begin() + static_cast<ptrdiff_t>(i), flags.begin() + 1, flags.end());
    i += flags.size() - 1;  // Past the flags inserted...
    --i;                    // ...less the one the loop adds.
  }
}

}  // namespace

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) {
    ++digits;
  }
  double number;
  if (digits == 0 || !absl::SimpleAtod(std::string(text.substr(0, digits)), &number)) {
    return std::nullopt;
  }
  const std::string unit = absl::AsciiStrToLower(std::string(text.substr(digits)));
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},       {"b", 1},        {"kb", 1e3},     {"mb", 1e6},      {"gb", 1e9},
      {"tb", 1e12},  {"k", 1024.0},   {"kib", 1024.0}, {"m", 1048576.0}, {"mib", 1048576.0},
      {"g", 0x1p30}, {"gib", 0x1p30}, {"t", 0x1p40},   {"tib", 0x1p40}};
  for (const auto& [name, factor] : units) {
    if (unit == name) scale = factor;
  }
  const double bytes = number * scale;
  if (scale == 0 || !(bytes < 0x1p63)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

void ExitUsageError(const char* argv0, const std::string& message) {
  std::string name = argv0;
  if (size_t slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  std::fprintf(stderr, "%s: %s (see --help)\n", name.c_str(), message.c_str());
  std::exit(2);
}

std::vector<char*> ParseCommandLineOrExit(int argc, char** argv) {
  // Normalised copies of the arguments live as long as the program: Abseil keeps the pointers
  // it returns for positional arguments.
  static std::vector<std::string> storage;
  static std::vector<char*> args;
  storage.assign(argv, argv + argc);
  // Flag files are read here, not by Abseil, so their flags follow the same conventions (- or
  // _ in names, errors that exit 2); a flag given after --flagfile overrides the file's.
  ExpandFlagFiles(argv[0], &storage, 0);
  argc = static_cast<int>(storage.size());
  // The operands, found here rather than by Abseil, which would take "-5" for a flag.
  std::vector<size_t> operands;
  bool positional_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string& arg = storage[static_cast<size_t>(i)];
    if (positional_only || arg.size() < 2 || arg[0] != '-' || IsNegativeNumber(arg)) {
      operands.push_back(static_cast<size_t>(i));
      continue;
    }
    if (arg == "--") {
      positional_only = true;
      continue;
    }
    const size_t dashes = arg[1] == '-' ? 2 : 1;
    const size_t eq = arg.find('=');
    std::string name =
        arg.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    for (char& c : name) {
      if (c == '-') c = '_';
    }
    arg = "--" + name + (eq == std::string::npos ? "" : arg.substr(eq));
    if (name == "help" || name == "h") PrintHelp(argv[0]);
    if (IsAbseilBuiltin(name)) {
      if (eq == std::string::npos && AbseilBuiltinTakesValue(name)) ++i;
      continue;
    }

    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && name.rfind("no", 0) == 0) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && eq == std::string::npos) continue;
    }
    if (flag == nullptr) ExitUsageError(argv[0], "unknown flag --" + name);

    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = storage[static_cast<size_t>(i + 1)];  // "--flag value" form; Abseil takes it too.
      ++i;
    } else {
      ExitUsageError(argv[0], "flag --" + name + " needs a value");
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      ExitUsageError(argv[0], "bad value '" + value + "' for --" + name + ": " + error);
    }
  }
  // --version prints "<program> <release> (commit <git describe>)" and exits 0.
  absl::FlagsUsageConfig usage;
  usage.version_string = [program = std::string(argv[0])] {
    return absl::StrCat(std::filesystem::path(program).filename().string(), " ", RINGKV_VERSION,
                        " (commit ", RINGKV_COMMIT, ")\n");
  };
  absl::SetFlagsUsageConfig(usage);
  // Abseil parses the flags (and runs its own, such as --flagfile) without the negative numbers.
  args.clear();
  for (std::string& arg : storage) {
    if (!IsNegativeNumber(arg)) args.push_back(arg.data());
  }
  (void)absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  std::vector<char*> rest = {storage[0].data()};
  for (size_t i : operands) rest.push_back(storage[i].data());
  return rest;
}

}  // namespace ringkv
