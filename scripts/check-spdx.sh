#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every source, header, script and build file git tracks names its license (SPDX) in its first
# three lines; prints the ones that do not and fails. Data (fixtures, plot data, images) and
# documents are left out. Run by `make test` (stage "license lines").
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
checked=0
while IFS= read -r f; do
	case "$f" in
	*.c | *.h | *.cu | *.cuh | *.cpp | *.hpp | *.js | *.py | *.sh | *.in | *.map | *.supp | \
		*CMakeLists.txt | Makefile | .ci/run | scripts/tandem-plot | scripts/trace-check) ;;
	*) continue ;;
	esac
	[ -f "$f" ] || continue
	checked=$((checked + 1))
	if ! head -n 3 "$f" | grep -q 'SPDX-License-Identifier: MIT'; then
		echo "no SPDX line in the first 3 lines: $f"
		missing=$((missing + 1))
	fi
done < <(git ls-files --cached --others --exclude-standard)
if [ "$missing" -ne 0 ]; then
	echo "$missing of $checked files lack 'SPDX-License-Identifier: MIT'"
	exit 1
fi
echo "$checked files carry an SPDX line"
