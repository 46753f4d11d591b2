#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library's exports against the public headers and the export map: every function the
# headers declare is exported, in the map's version node, and nothing else is (no tdm__ internal,
# no test hook).
#   exports-test.sh LIBTANDEM_SO MAP HEADER...
set -euo pipefail
export LC_ALL=C # one sort order on every machine (the suffix @@ sorts by locale otherwise)
lib=$1 map=$2
shift 2
declared=$(grep -hE '^[a-z_][a-z0-9_ *]*\btdm_[a-z0-9_]+\(' "$@" | grep -oE '\btdm_[a-z0-9_]+\(' |
	tr -d '(' | sort -u)
listed=$(grep -oE '^[[:space:]]+tdm_[a-z0-9_]+;' "$map" | tr -d ' \t;' | sort -u)
node=$(grep -oE "^TANDEM_([A-Z]+_)?[0-9.]+" "$map")
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v "^${node}\$" | sort -u)
fail=0
if [ "$declared" != "$listed" ]; then
	echo "the map and the headers disagree:"
	diff <(echo "$declared") <(echo "$listed") || true
	fail=1
fi
if [ "$(echo "$declared" | sed "s/\$/@@${node}/")" != "$exported" ]; then
	echo "the library exports other than the headers declare (in ${node}):"
	diff <(echo "$declared" | sed "s/\$/@@${node}/") <(echo "$exported") || true
	fail=1
fi
[ "$fail" -eq 0 ] && echo "$(echo "$declared" | wc -l) functions exported, in ${node}, nothing else"
exit "$fail"
