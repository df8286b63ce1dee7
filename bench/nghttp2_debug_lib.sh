#!/bin/bash
# Builds the installed libnghttp2 again, from Debian's source package of the same version (its
# patches applied), with -O2 -g: a drop-in library whose static functions perf can name, which the
# Debian build strips (and Debian's debug symbols are not reachable from here). For profiles only:
#
#   bench/nghttp2_debug_lib.sh [OUT=bench-results/nghttp2-debug]
#   NGHTTP2_LIB=bench-results/nghttp2-debug bench/profile_calls.py
#
# Needs deb.debian.org (source packages) and dpkg-source (dpkg-dev); changes nothing outside OUT
# and a temporary directory.
set -euo pipefail
out=$(realpath -m "${1:-bench-results/nghttp2-debug}")
version=$(dpkg-query -W -f='${Version}' libnghttp2-14)
command -v dpkg-source > /dev/null || { echo "needs dpkg-source: apt-get install dpkg-dev" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. /etc/os-release
printf 'deb-src http://deb.debian.org/debian %s main\ndeb-src http://deb.debian.org/debian-security %s-security main\n' \
  "$VERSION_CODENAME" "$VERSION_CODENAME" > "$work/sources.list"
mkdir -p "$work/lists/partial"
apt=(apt-get -qq -o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/nonexistent
     -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
"${apt[@]}" update
(cd "$work" && "${apt[@]}" source "nghttp2=$version" > /dev/null 2>&1)
lib=$(echo "$work"/nghttp2-*/lib)
upstream=${version%%-*}
sed -e "s/@PACKAGE_VERSION@/$upstream/" -e 's/@PACKAGE_VERSION_NUM@/0/' \
  "$lib/includes/nghttp2/nghttp2ver.h.in" > "$lib/includes/nghttp2/nghttp2ver.h"
printf '#define HAVE_ARPA_INET_H 1\n#define HAVE_NETINET_IN_H 1\n#define HAVE_UNISTD_H 1\n#define HAVE_TIME_H 1\n' > "$lib/config.h"
mkdir -p "$out"
gcc -O2 -g -fPIC -shared -DHAVE_CONFIG_H -DBUILDING_NGHTTP2 -I"$lib/includes" -I"$lib" "$lib"/*.c \
  -Wl,-soname,libnghttp2.so.14 -o "$out/libnghttp2.so.14"
echo "$out/libnghttp2.so.14: nghttp2 $version, -O2 -g"
