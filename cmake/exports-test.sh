#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library's exports against the public headers and the export map: every function the
# headers declare is exported, in its version node of the map, and nothing else is (no tdm__ internal,
# no test hook).
#   exports-test.sh LIBTANDEM_SO MAP HEADER...
set -euo pipefail
export LC_ALL=C # one sort order on every machine (the suffix @@ sorts by locale otherwise)
lib=$1 map=$2
shift 2
declared=$(grep -hE '^[a-z_][a-z0-9_ *]*\btdm_[a-z0-9_]+\(' "$@" | grep -oE '\btdm_[a-z0-9_]+\(' |
	tr -d '(' | sort -u)
listed=$(grep -oE '^[[:space:]]+tdm_[a-z0-9_]+;' "$map" | tr -d ' \t;' | sort -u)
# Each function in the node of the release that added it: name@@NODE.
nodes=$(grep -oE "^TANDEM_([A-Z]+_)?[0-9.]+" "$map")
expected=$(awk '/^TANDEM_([A-Z]+_)?[0-9.]+/ { node = $1 }
	/^[[:space:]]+tdm_[a-z0-9_]+;/ { gsub(/[ \t;]/, ""); print $0 "@@" node }' "$map" | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -vxF "$nodes" | sort -u)
fail=0
if [ "$declared" != "$listed" ]; then
	echo "the map and the headers disagree:"
	diff <(echo "$declared") <(echo "$listed") || true
	fail=1
fi
if [ "$expected" != "$exported" ]; then
	echo "the library exports other than the map's nodes say:"
	diff <(echo "$expected") <(echo "$exported") || true
	fail=1
fi
[ "$fail" -eq 0 ] && echo "$(echo "$declared" | wc -l) functions exported, in" $nodes", nothing else"
exit "$fail"
