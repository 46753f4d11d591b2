# SPDX-License-Identifier: MIT
# Thin wrapper over CMake (CMakeLists.txt, CMakePresets.json). Override any variable below:
#   make build BUILD_TYPE=Debug BUILD_DIR=build-debug CMAKE_FLAGS=-DTANDEM_CUDA=OFF
# CMAKE_PREFIX_PATH from the environment reaches cmake unchanged.
BUILD_DIR   ?= build
BUILD_TYPE  ?= Release
CMAKE_FLAGS ?=
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_JOBS  ?= 2
CMAKE       ?= cmake
CTEST       ?= ctest

# What clang-format checks and cppcheck reads; folders that do not exist yet are left out.
FORMAT_FILES = $(shell find $(wildcard include base executor gpu mpi testing tests perf examples cmake) -type f \
	\( -name '*.[ch]' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
LINT_DIRS    = $(wildcard include base executor gpu mpi testing examples)
CPPCHECK_FLAGS = --error-exitcode=1 --enable=warning,performance,portability --inline-suppr \
	--std=c11 -q --suppress=missingIncludeSystem -I include -I testing -I . -I executor -I gpu
VALGRIND_FLAGS = --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect
stage = @printf '\n==== %s ====\n' "$(1)"

MAKEFLAGS += --no-print-directory

.PHONY: all deps build demo bench test check clean format license-check \
	format-check cppcheck test-release test-nocuda test-tsan test-asan valgrind
.NOTPARALLEL:

all: build

deps:
	@bash scripts/deps.sh

build:
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS)

# The pipeline example: batch N+1 prepared while N computes and N-1 copies back, on the GPU, or
# on tandem's GPU simulator (saying so) where there is none.
demo: deps build
	$(BUILD_DIR)/examples/pipeline

bench: build
	$(BUILD_DIR)/perf/tandem-bench all

# Every stage CI runs, in order; the first failure stops the rest.
test: deps
	@$(MAKE) license-check format-check cppcheck test-release test-nocuda test-tsan test-asan valgrind

# A quick look: the Release stage alone (build + ctest in BUILD_DIR). `make test` runs it among
# the rest; scripts/test-under-load.sh runs make test beside a build. docs/guide/testing.md.
check: test-release

license-check:
	$(call stage,license lines (SPDX))
	@bash scripts/check-spdx.sh

format-check:
	$(call stage,format check (clang-format))
	@if ! command -v clang-format >/dev/null; then echo "clang-format not found: skipped"; \
	else clang-format --dry-run -Werror $(FORMAT_FILES) && echo "$(words $(FORMAT_FILES)) files clean"; fi

cppcheck:
	$(call stage,cppcheck)
	@if ! command -v cppcheck >/dev/null; then echo "cppcheck not found: skipped"; \
	else cppcheck $(CPPCHECK_FLAGS) $(LINT_DIRS) && echo "$(LINT_DIRS): clean"; fi

test-release:
	$(call stage,$(BUILD_TYPE) build + ctest in $(BUILD_DIR))
	@$(MAKE) build
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure -j$(CTEST_JOBS)

# Without the CUDA toolkit (as a user without one builds): everything compiles, the benchmarks
# among them, and tandem-bench runs its GPU subcommands on the simulator.
test-nocuda:
	$(call stage,build without CUDA + tandem-bench on sim in build-nocuda)
	$(CMAKE) -S . -B build-nocuda -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTANDEM_CUDA=OFF $(CMAKE_FLAGS)
	$(CMAKE) --build build-nocuda -j$(JOBS)
	build-nocuda/perf/tandem-bench pipeline --backend sim --batches 4 --reps 1 >/dev/null
	build-nocuda/perf/tandem-bench pinned --backend sim --reps 1 --n 1000 >/dev/null
	build-nocuda/perf/tandem-bench gpu-throughput --backend sim --workers 1,2 --kernel-us 10 \
		--n 200 --reps 1 >/dev/null
	@echo "built without CUDA; tandem-bench pipeline, pinned and gpu-throughput ran on sim"

# Presets tsan and asan build into build-tsan and build-asan.
test-tsan test-asan: test-%:
	$(call stage,$* build + ctest in build-$*)
	$(CMAKE) --preset $* $(CMAKE_FLAGS)
	$(CMAKE) --build --preset $* -j$(JOBS)
	$(CTEST) --preset $* -j$(CTEST_JOBS)

# valgrind_one,PROGRAM: PROGRAM (under BUILD_DIR) under valgrind, where both exist.
define valgrind_one
	$(call stage,valgrind $(BUILD_DIR)/$(1))
	@if ! command -v valgrind >/dev/null; then echo "valgrind not found: skipped"; \
	elif [ ! -x $(BUILD_DIR)/$(1) ]; then echo "no $(1): skipped"; \
	else valgrind $(VALGRIND_FLAGS) $(BUILD_DIR)/$(1); fi
endef

valgrind:
	$(call valgrind_one,examples/demo)
	$(call valgrind_one,tests/fresh_init)

format:
	@if [ -n "$(FORMAT_FILES)" ]; then clang-format -i $(FORMAT_FILES); fi

clean:
	rm -rf $(BUILD_DIR) build-debug build-nocuda build-tsan build-asan

# The figures of README.md and perf/README.md (docs/img/), drawn by scripts/tandem-plot (Debian's
# python3-matplotlib) from what perf/plot-data/ keeps: no build needed. The CPU scaling and the
# latency figures come from the newest DATE-MACHINE-TREE-cpu.jsonl (scripts/gpu-cpu-bench.sh) and
# -gpu.jsonl (scripts/gpu-machine.sh bench) there; CPU_DATA= and GPU_DATA= name others.
PLOT      = scripts/tandem-plot
PLOT_DATA = perf/plot-data
PLOT_TRACE = $(PLOT_DATA)/sim-pipeline-trace.json
H200      = $(PLOT_DATA)/2026-12-01-h200
CPU_DATA ?= $(lastword $(sort $(wildcard $(PLOT_DATA)/*-cpu.jsonl)))
GPU_DATA ?= $(lastword $(sort $(wildcard $(PLOT_DATA)/*-gpu.jsonl)))
# data_about,FILE: "H200 machine, 2026-12-01, tree 67576aa" from a plot-data file's name.
data_about = $(shell echo $(notdir $(1)) | \
	awk -F- '{ printf "%s machine, %s-%s-%s, tree %s", toupper($$4), $$1, $$2, $$3, $$5 }')
.PHONY: plots plot-trace
plots:
	@mkdir -p docs/img
	$(PLOT) timeline $(PLOT_TRACE) -o docs/img/timeline.png \
		--title "examples/pipeline traced, on tandem's GPU simulator (2 CPUs)"
	$(PLOT) scaling $(H200)-43432ed-throughput-conn-unset-1.jsonl \
		$(H200)-43432ed-throughput-conn-unset-2.jsonl -o docs/img/gpu-throughput.png \
		--title "gpu-throughput on one H200, 16 cores (2026-12-01, median of two passes)"
	$(PLOT) scaling $(CPU_DATA) -o docs/img/cpu-scaling.png \
		--title "fib and skynet: ms against threads ($(call data_about,$(CPU_DATA)))"
	$(PLOT) latency $(GPU_DATA) -o docs/img/latency.png \
		--title "await round trips and pipeline runs ($(call data_about,$(GPU_DATA)))"
	$(PLOT) pipeline $(H200)-d147f80-pipeline-1.jsonl $(H200)-d147f80-pipeline-2.jsonl \
		-o docs/img/pipeline.png --title "pipeline on one H200 (2026-12-01, median of two calls)"

# The timeline's trace, made anew: examples/pipeline on the simulator (then `make plots`).
plot-trace: build
	TANDEM_GPU=sim TANDEM_TRACE=$(PLOT_TRACE) $(BUILD_DIR)/examples/pipeline
	scripts/trace-check --tasks run $(PLOT_TRACE)
