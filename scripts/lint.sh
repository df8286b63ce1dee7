#!/usr/bin/env bash
# The code's habits, checked: every tracked C++ file as clang-format writes it (.clang-format),
# every .cc file (and the headers it includes) through clang-tidy (.clang-tidy: Google naming),
# and the include graph (scripts/include_graph.py: no cycle between units, no arrow up between
# rooms). Prints what is wrong and how to fix it; exits 1 on any finding.
# Usage: scripts/lint.sh [--fix] [BUILD_DIR]   (after a build: clang-tidy reads its
#        compile_commands.json; default build). --fix rewrites the files clang-format would.
set -uo pipefail
cd "$(dirname "$0")/.."
fix=0
if [ "${1:-}" = --fix ]; then fix=1; shift; fi
build=${1:-build}
failed=0

mapfile -t sources < <(git ls-files '*.h' '*.cc')
if [ "$fix" = 1 ]; then
  clang-format -i "${sources[@]}"
fi
if ! clang-format --dry-run --Werror "${sources[@]}" 2>/tmp/ringkv-format.$$; then
  head -40 /tmp/ringkv-format.$$
  echo "lint: clang-format would change $(grep -c 'error:' /tmp/ringkv-format.$$) places;" \
       "scripts/lint.sh --fix rewrites them"
  failed=1
fi
rm -f /tmp/ringkv-format.$$

if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: $build/compile_commands.json is missing: build first (scripts/setup.sh $build)"
  failed=1
else
  # Two at a time: this machine has two cores. --quiet drops the "N warnings generated" lines
  # of the system headers, which the header filter leaves out anyway. The findings file decides,
  # not the pipeline's status: clang-tidy exits non-zero on every finding (WarningsAsErrors), so
  # a test of the status alone would read a finding as clean, or a crash as a finding.
  git ls-files '*.cc' | xargs -P2 -n4 clang-tidy -p "$build" --quiet 2>&1 |
    grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' >/tmp/ringkv-tidy.$$
  tidy_status=${PIPESTATUS[1]}
  if grep -q -E 'warning:|error:' /tmp/ringkv-tidy.$$; then
    grep -E 'warning:|error:' /tmp/ringkv-tidy.$$ | sort -u | head -60
    echo "lint: clang-tidy found $(grep -E 'warning:|error:' /tmp/ringkv-tidy.$$ | sort -u | wc -l)" \
         "problems (.clang-tidy says which checks)"
    failed=1
  elif [ "$tidy_status" != 0 ]; then
    tail -20 /tmp/ringkv-tidy.$$
    echo "lint: clang-tidy exited $tidy_status with no finding: see its output above"
    failed=1
  fi
  rm -f /tmp/ringkv-tidy.$$
fi

python3 scripts/include_graph.py || failed=1

if [ "$failed" = 0 ]; then echo "lint: clean"; fi
exit "$failed"
