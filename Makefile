# Makefile — builds, tests and runs hanayo.
#
# Targets
#   make              build/hanayo (and build/libhanayo.a); the CUDA backend
#                     too when nvcc is found (on PATH, else /usr/local/cuda/bin)
#   make NO_CUDA=1    the same, CPU backend only
#   make tests        build the unit-test programs (build/tests/test_*)
#   make check        build, run this build's tests, print the tally
#   make test         check in build/, then again under ASan+UBSan in
#                     build-asan/ (CPU only), the threaded tests under TSan
#                     in build-tsan/, then one aggregate tally line
#   make test-one T=NAME   one test, by name: T=plan runs tests/test_plan.c
#                     (or .sh, .py; a script without the prefix by its own
#                     name: T=resim); V=1 shows its whole log
#   make asan         ASan+UBSan build in build-asan/, run all its tests
#   make tsan         TSan build in build-tsan/, run its test programs
#   make bench        build build/hanayo-bench and run it: tokens/s of each
#                     schedule at P = 2, the CPU backend's GEMMs against bare
#                     cblas_sgemm, where step time goes (docs/measurements.md);
#                     BENCH_ARGS="--json FILE" also writes JSON.
#                     Not part of `make test`: timings are printed, never
#                     asserted
#   make run          install what the build lacks (tools/deps.sh), build,
#                     write the synthetic shards of tiny-gpt (below) if
#                     absent, then `hanayo train configs/tiny-gpt.json`
#   make data         only those shards: data/synth_train.bin, synth_val.bin
#   make fuzz         build the libFuzzer harnesses of tests/fuzz/ with clang
#                     (ASan+UBSan) in build-fuzz/ and run each for
#                     FUZZ_SECONDS seconds from a seed corpus of the project's
#                     good and bad inputs; prints each one's executions; a
#                     crash fails it (see "Fuzzing" below). Not part of
#                     `make test`: .ci/run runs it after
#   make fuzz-build   only build them
#   make clean        remove every build directory
#
# Variables (set on the command line: `make NO_CUDA=1 CC=clang`)
#   NO_CUDA=1         do not build the CUDA backend even if nvcc is there
#   NO_MPI=1          do not compile MPI in even if mpicc is there (data
#                     parallelism across processes, lib/dp.c)
#   MPICC=path        the MPI compiler wrapper whose flags are used (default:
#                     mpicc on PATH)
#   NVCC=path         the CUDA compiler (default: found as above)
#   CUDA_GENCODE      GPU targets (default: sm_90 code + compute_90 PTX, so
#                     Hopper runs native code and newer GPUs JIT the PTX)
#   CUDA_GENCODE_SM90A  the targets of kernels/cuda/attention_sm90.cu alone
#                     (default: sm_90a machine code only; wgmma and setmaxnreg
#                     exist nowhere else, and its launcher runs it on 9.0 only)
#   CC, CFLAGS, LDFLAGS, NVCCFLAGS   as usual (CFLAGS default: -O2 -g;
#                     NVCCFLAGS: -O2 -g -lineinfo, device lines for profilers)
#   BUILD=dir         build directory (default: build)
#   SANITIZE=list     -fsanitize=list (implies no CUDA); asan/tsan set it
#   BLAS_LIBS         libraries for the CPU GEMMs (kernels/cpu calls cblas;
#                     default -lopenblas, from libopenblas-dev)
#   TEST_TIMEOUT=s    seconds before one test program counts as hung (300)
#   FUZZ_SECONDS=s    make fuzz: seconds per harness (default 20: two minutes
#                     for the six)
#   FUZZ_CC           make fuzz: the compiler, a clang with libFuzzer (clang)
#   PYTHON            the python3 for tests/*.py (default: one with numpy)
#
# Link: jansson and cudart are linked statically so build/hanayo runs on a
# machine without libjansson or a CUDA toolkit; cuBLASLt is dynamic (it is
# large and versioned with the driver stack) and found through an rpath to
# the toolkit's library directory. With no driver, cudart reports zero
# devices and the CPU backend runs.
#
# Tests, and the one line that sums them
#   tests/test_*.c    each is one program linked with libhanayo.a; it runs
#                     from the repository root
#   tests/*.sh        run with bash, tests/*.py with $(PYTHON), both from the
#                     repository root with HANAYO=<absolute path to the
#                     hanayo binary under test> in the environment
# Every test, of any kind, prints one or more lines exactly
#     NAME: N passed, N failed
# (NAME without spaces; tests/test.h's TEST_END prints it) and exits non-zero
# when anything failed. Each test's output goes to BUILD/results/*/NAME.log
# followed by a last line "hy-test-exit: STATUS". The tally sums N passed
# and N failed over all those lines; a test that printed no such line, or
# exited non-zero while reporting no failure (a crash, a sanitizer report,
# a timeout), counts as one more failure. `make test` ends with
#     tests: N passed, N failed
# over build/, build-asan/ and build-tsan/ together and exits non-zero if
# N failed > 0.

.DEFAULT_GOAL := all
SHELL := /bin/bash

BUILD ?= build
ifeq ($(origin CC),default)
CC := gcc
endif
CFLAGS ?= -O2 -g
NVCCFLAGS ?= -O2 -g -lineinfo
TEST_TIMEOUT ?= 300
BLAS_LIBS ?= -lopenblas
NPROC := $(shell nproc 2>/dev/null || echo 2)

# tests/*.py may use numpy (Debian's python3-numpy,
# DESIGN §6 "What correct means"). Use the first python3 that has it: PATH's, else the system's (a
# pyenv or venv python3 earlier on PATH may lack it). Looked up once, and only
# if a .py test runs.
PYTHON ?= $(eval PYTHON := $(or $(shell for p in python3 /usr/bin/python3; do \
    "$$p" -c 'import numpy' >/dev/null 2>&1 && command -v "$$p" && break; done),python3))$(PYTHON)

# ---------------------------------------------------------------------------
# Is the CUDA backend built? Not with NO_CUDA (any value but 0), not under a
# sanitizer (cudart and ASan/TSan do not mix), else exactly when nvcc exists.

ifneq ($(filter-out 0,$(strip $(NO_CUDA))),)
HY_CUDA :=
else ifneq ($(strip $(SANITIZE)),)
HY_CUDA :=
else
ifeq ($(origin NVCC),undefined)
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
endif
HY_CUDA := $(if $(strip $(NVCC)),1,)
endif

ifeq ($(HY_CUDA),1)
# The toolkit's library directory, found from nvcc's location: first as
# invoked (keeps a version-free /usr/local/cuda in the rpath), then with
# symlinks resolved, then Debian's multiarch directory (nvidia-cuda-toolkit).
HY_ARCH := $(shell uname -m)
HY_CUDA_HOMES := $(patsubst %/bin/,%,$(dir $(NVCC)) $(dir $(realpath $(NVCC))))
HY_CUDA_CANDIDATES := $(foreach h,$(HY_CUDA_HOMES),$(h)/lib64 $(h)/lib \
    $(h)/targets/$(HY_ARCH)-linux/lib) /usr/lib/$(HY_ARCH)-linux-gnu
ifeq ($(origin CUDA_LIBDIR),undefined)
CUDA_LIBDIR := $(firstword $(foreach d,$(HY_CUDA_CANDIDATES),\
    $(patsubst %/libcudart_static.a,%,$(wildcard $(d)/libcudart_static.a))))
endif
CUDA_GENCODE ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
CUDA_GENCODE_SM90A ?= -gencode arch=compute_90a,code=sm_90a
HY_CUDA_LIBS = $(CUDA_LIBDIR)/libcudart_static.a -ldl -lrt -lpthread \
    -Wl,-rpath,$(CUDA_LIBDIR) -lstdc++
endif

# ---------------------------------------------------------------------------
# Is MPI compiled in (data parallelism across processes, lib/dp.c)? Not
# with NO_MPI (any value but 0), else exactly when mpicc is found (Debian:
# libopenmpi-dev): its compile flags go to lib/dp.c alone, its link flags
# to every program. libmpi is linked dynamically: it is the cluster's own.

ifneq ($(filter-out 0,$(strip $(NO_MPI))),)
HY_MPI :=
else
MPICC ?= $(shell command -v mpicc 2>/dev/null)
HY_MPI := $(if $(strip $(MPICC)),1,)
endif
ifeq ($(HY_MPI),1)
HY_MPI_CFLAGS := $(or $(shell $(MPICC) --showme:compile 2>/dev/null),$(shell pkg-config --cflags mpich 2>/dev/null))
HY_MPI_LIBS := $(or $(shell $(MPICC) --showme:link 2>/dev/null),$(shell pkg-config --libs mpich 2>/dev/null))
endif

# ---------------------------------------------------------------------------
# jansson, statically: libjansson.a from libjansson-dev.

HY_JANSSON_DIR := $(shell pkg-config --variable=libdir jansson 2>/dev/null)
ifeq ($(origin JANSSON_LIB),undefined)
JANSSON_LIB := $(firstword $(wildcard $(if $(HY_JANSSON_DIR),$(HY_JANSSON_DIR)/libjansson.a) \
    $(filter /%,$(shell $(CC) -print-file-name=libjansson.a 2>/dev/null))))
endif
HY_JANSSON_CFLAGS := $(shell pkg-config --cflags jansson 2>/dev/null)

# ---------------------------------------------------------------------------
# Flags. _GNU_SOURCE (which implies POSIX.1-2008) is set here, once, for
# every C file: threads, futexes, affinity and M_PI all need more than
# strict C11. Source files must not #define feature macros themselves (a
# differing redefinition is a warning, hence an error).

HY_SAN_FLAGS := $(if $(strip $(SANITIZE)),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all)
HY_CPPFLAGS = -D_GNU_SOURCE -Ilib -Itools $(HY_JANSSON_CFLAGS) $(if $(HY_CUDA),-DHY_HAVE_CUDA=1) $(CPPFLAGS)
HY_CFLAGS = -std=c11 -Wall -Wextra -Wformat=2 -Werror $(CFLAGS) $(HY_SAN_FLAGS)
HY_LDFLAGS = $(LDFLAGS) $(HY_SAN_FLAGS)
HY_LDLIBS = $(JANSSON_LIB) $(BLAS_LIBS) $(HY_CUDA_LIBS) $(HY_MPI_LIBS) -lm -lpthread $(LDLIBS)
HY_NVCCFLAGS = -std=c++17 $(CUDA_GENCODE) $(NVCCFLAGS) -Werror all-warnings \
    -Xcompiler -Wall,-Wextra,-Werror -DHY_HAVE_CUDA=1 -DHY_CUDA_LIBDIR='"$(CUDA_LIBDIR)"' \
    -Ilib -Ikernels/cuda -Igraphs $(CPPFLAGS)

# ---------------------------------------------------------------------------
# Sources, found by wildcard. kernels/cuda/*.cu and graphs/*.cu make the CUDA
# backend; kernels/cuda/*.c are its stand-ins for builds without it
# (answering "no CUDA" through the same functions), so exactly one of the
# two is ever linked.

HY_OBJ := $(BUILD)/obj
HY_C_SRCS := $(wildcard lib/*.c kernels/cpu/*.c) \
    $(if $(HY_CUDA),,$(wildcard kernels/cuda/*.c))
HY_CU_SRCS := $(if $(HY_CUDA),$(wildcard kernels/cuda/*.cu graphs/*.cu))
HY_LIB_OBJS := $(HY_C_SRCS:%.c=$(HY_OBJ)/%.o) $(HY_CU_SRCS:%.cu=$(HY_OBJ)/%.o)
HY_LIB := $(BUILD)/libhanayo.a
# The command line's commands (tools/cli.h): every tools/*.c but the
# programs' mains. hanayo and the tests link them above the library.
HY_MAINS := tools/hanayo.c tools/bench.c tools/bench_copy.c
HY_CLI_OBJS := $(patsubst %.c,$(HY_OBJ)/%.o,$(filter-out $(HY_MAINS),$(wildcard tools/*.c)))
HY_CLI := $(BUILD)/libhanayo-cli.a
HY_BIN := $(BUILD)/hanayo
HY_BENCH := $(BUILD)/hanayo-bench
HY_BENCH_COPY := $(BUILD)/hanayo-bench-copy

HY_TEST_SRCS := $(wildcard tests/test_*.c)
HY_TEST_BINS := $(HY_TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
HY_RESULTS := $(BUILD)/results
HY_UNIT_LOGS := $(HY_TEST_SRCS:tests/%.c=$(HY_RESULTS)/unit/%.log)
HY_SCRIPT_LOGS := $(patsubst tests/%.sh,$(HY_RESULTS)/sh/%.log,$(wildcard tests/*.sh)) \
    $(patsubst tests/%.py,$(HY_RESULTS)/py/%.log,$(wildcard tests/*.py))

# ---------------------------------------------------------------------------
# Build

# tools/deps.sh installs what these lack first: test, check, run, fuzz.
.PHONY: all tests check check-unit test asan tsan run bench clean FORCE hy-fresh-results

# The benches are built with everything (so they cannot rot) but only run
# by `make bench` (hanayo-bench-copy by tools/gpu-check.sh on a GPU).
all: $(HY_BIN) $(HY_BENCH) $(HY_BENCH_COPY) $(HY_LIB)

tests: $(HY_TEST_BINS)

# Stamps: rewritten only when their content changes, so a change of flags
# or backends rebuilds every object, and a change in the set of sources
# rebuilds the archive (ar never drops a stale member by itself).
hy_stamp = mkdir -p $(dir $(1)) && printf '%s\n' '$(2)' | cmp -s - $(1) || printf '%s\n' '$(2)' > $(1)
HY_FLAGS_STAMP := $(BUILD)/flags.stamp
HY_MEMBERS_STAMP := $(BUILD)/members.stamp

$(HY_FLAGS_STAMP): FORCE
	@$(call hy_stamp,$@,$(CC) $(HY_CPPFLAGS) $(HY_CFLAGS) | $(NVCC) $(HY_NVCCFLAGS) $(CUDA_GENCODE_SM90A) | $(HY_LDFLAGS) $(HY_LDLIBS) | mpi $(HY_MPI_CFLAGS))


$(HY_MEMBERS_STAMP): FORCE
	@$(call hy_stamp,$@,$(HY_LIB_OBJS) | $(HY_CLI_OBJS))

$(HY_OBJ)/%.o: %.c $(HY_FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(HY_CPPFLAGS) $(HY_CFLAGS) -MMD -MP -c -o $@ $<

# lib/dp.c alone sees mpi.h.
$(HY_OBJ)/lib/dp.o: lib/dp.c $(HY_FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(HY_CPPFLAGS) $(if $(HY_MPI),$(HY_MPI_CFLAGS) -DHY_HAVE_MPI=1) $(HY_CFLAGS) -MMD -MP -c -o $@ $<

$(HY_OBJ)/%.o: %.cu $(HY_FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(HY_NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

# The Hopper attention is built for sm_90a alone (the -gencode form: the
# -arch=sm_90a shorthand also runs a plain sm_90 pass that rejects wgmma),
# whatever CUDA_GENCODE the command line gives the rest.
$(HY_OBJ)/kernels/cuda/attention_sm90.o: override CUDA_GENCODE = $(CUDA_GENCODE_SM90A)

$(HY_LIB): $(HY_LIB_OBJS) $(HY_MEMBERS_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(HY_LIB_OBJS)

$(HY_CLI): $(HY_CLI_OBJS) $(HY_MEMBERS_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(HY_CLI_OBJS)

# Checked when linking, not when parsing, so that `make clean` needs neither.
hy_link_check = $(if $(JANSSON_LIB),,$(error libjansson.a not found: run bash tools/deps.sh build (or install libjansson-dev and pkg-config), or set JANSSON_LIB=/path/to/libjansson.a)) \
    $(if $(HY_CUDA),$(if $(CUDA_LIBDIR),,$(error nvcc found at $(NVCC) but not libcudart_static.a next to it: set CUDA_LIBDIR=..., or build with NO_CUDA=1)))

$(HY_BIN): $(HY_OBJ)/tools/hanayo.o $(HY_CLI) $(HY_LIB)
	@$(hy_link_check)
	$(CC) $(HY_LDFLAGS) -o $@ $< $(HY_CLI) $(HY_LIB) $(HY_LDLIBS)

$(HY_BENCH): $(HY_OBJ)/tools/bench.o $(HY_LIB)
	@$(hy_link_check)
	$(CC) $(HY_LDFLAGS) -o $@ $< $(HY_LIB) $(HY_LDLIBS)

$(HY_BENCH_COPY): $(HY_OBJ)/tools/bench_copy.o $(HY_LIB)
	@$(hy_link_check)
	$(CC) $(HY_LDFLAGS) -o $@ $< $(HY_LIB) $(HY_LDLIBS)

$(BUILD)/tests/%: $(HY_OBJ)/tests/%.o $(HY_CLI) $(HY_LIB)
	@mkdir -p $(@D)
	@$(hy_link_check)
	$(CC) $(HY_LDFLAGS) -o $@ $< $(HY_CLI) $(HY_LIB) $(HY_LDLIBS)

# Test objects come from a pattern chain; keep them (make would delete them
# as intermediates and relink every test on the next run).
.SECONDARY: $(HY_TEST_SRCS:tests/%.c=$(HY_OBJ)/tests/%.o)

-include $(shell find $(HY_OBJ) -name '*.d' 2>/dev/null)

# ---------------------------------------------------------------------------
# Run tests (see the convention at the top). Each test writes its own log, so
# they run in parallel; a failing test never stops make, the tally decides.

HY_SUMMARY_RE := ^[^ ]+: [0-9]+ passed, [0-9]+ failed$$
HY_EXIT_MARK := hy-test-exit:
HY_TIME_MARK := hy-test-ms:

# awk over logs: sums the summary lines, adds the failures described above,
# names every failing log, prints the five slowest programs (each log's
# time mark: wall milliseconds, to see where the suite's time goes) and
# "tests: N passed, N failed", and exits 1 if N failed > 0. With -v
# quiet=1 (one test's log) it prints only that log's summary lines and,
# when something is counted beyond them, why.
HY_TALLY := awk -v quiet=0 '\
    FNR == 1 { seen = 0; mine = 0 } \
    /$(HY_SUMMARY_RE)/ { pass += $$2; fail += $$4; mine += $$4; seen = 1; if (quiet) print } \
    /^$(HY_EXIT_MARK) [0-9]+$$/ { \
        note = ""; \
        if (!seen) note = "no \"NAME: N passed, N failed\" line, exit status " $$2; \
        else if ($$2 != 0 && mine == 0) note = "exit status " $$2 " with no failure reported"; \
        if (note != "" && $$2 == 124) note = note " (timed out after $(TEST_TIMEOUT) s)"; \
        if (note != "") { fail++; mine++; note = note " (counted as 1 failure)" } \
        if (quiet && note != "") print FILENAME ": " note; \
        if (!quiet && mine > 0) print "FAILED " FILENAME (note != "" ? ": " note : "") } \
    /^$(HY_TIME_MARK) [0-9]+$$/ { ms[FILENAME] = $$2 } \
    END { if (!quiet) { \
            n = 0; for (f in ms) { n++; name[n] = f } \
            for (i = 1; i <= n && i <= 5; i++) { \
                k = i; for (j = i + 1; j <= n; j++) if (ms[name[j]] > ms[name[k]]) k = j; \
                t = name[i]; name[i] = name[k]; name[k] = t; \
                printf "%s %s %.0f s", (i == 1 ? "slowest:" : ","), name[i], ms[name[i]] / 1000 } \
            if (n > 0) printf "\n"; \
            printf "tests: %d passed, %d failed\n", pass, fail } \
          exit fail != 0 }'

# Sanitizer reports go to the log; UBSan with a stack, LSan on (ASan's default).
export UBSAN_OPTIONS ?= print_stacktrace=1
export ASAN_OPTIONS ?= detect_leaks=1
export TSAN_OPTIONS ?= second_deadlock_stack=1

# $(call hy_run_test,COMMAND): run COMMAND into the target's log, append the
# exit mark, show the summary lines, and the whole log when it failed.
define hy_run_test
@mkdir -p $(@D)
@{ hy_t0=$$(date +%s%N); HANAYO=$(abspath $(HY_BIN)) HY_SANITIZE=$(SANITIZE) timeout $(TEST_TIMEOUT) $(1); \
    hy_rc=$$?; echo "$(HY_TIME_MARK) $$(( ($$(date +%s%N) - hy_t0) / 1000000 ))"; echo "$(HY_EXIT_MARK) $$hy_rc"; } > $@ 2>&1 </dev/null; \
    $(subst quiet=0,quiet=1,$(HY_TALLY)) $@ || { echo "---- FAILED: $< (log $@) ----"; cat $@; echo "----"; }
endef

# Old logs go first, so the tally never counts a test that no longer exists.
hy-fresh-results:
	@rm -rf $(HY_RESULTS)

$(HY_RESULTS)/unit/%.log: $(BUILD)/tests/% FORCE | hy-fresh-results
	$(call hy_run_test,$<)

$(HY_RESULTS)/sh/%.log: tests/%.sh $(HY_BIN) FORCE | hy-fresh-results
	$(call hy_run_test,bash $<)

$(HY_RESULTS)/py/%.log: tests/%.py $(HY_BIN) FORCE | hy-fresh-results
	$(call hy_run_test,$(PYTHON) $<)

.PHONY: hy-run-all hy-run-unit hy-run-threaded
hy-run-all: $(HY_UNIT_LOGS) $(HY_SCRIPT_LOGS)
hy-run-unit: $(HY_UNIT_LOGS)

# The test programs that start threads: make test runs them once more under
# ThreadSanitizer.
HY_THREADED_TESTS := test_mailbox test_runtime test_order_threads test_polish
hy-run-threaded: $(HY_THREADED_TESTS:%=$(HY_RESULTS)/unit/%.log)

# -j only when the caller gave none (a second -j would break the jobserver).
# $(MAKE) is written out in each recipe line: make hands its jobserver only
# to lines where it sees $(MAKE) itself.
HY_JOBS = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(NPROC))
HY_ASAN_VARS := BUILD=build-asan SANITIZE=address,undefined NO_CUDA=1
HY_TSAN_VARS := BUILD=build-tsan SANITIZE=thread NO_CUDA=1

check:
	@bash tools/deps.sh test
	@$(MAKE) --no-print-directory $(HY_JOBS) all hy-run-all
	@$(HY_TALLY) $$(find $(HY_RESULTS) -name '*.log' | sort) </dev/null

check-unit:
	@$(MAKE) --no-print-directory $(HY_JOBS) hy-run-unit
	@$(HY_TALLY) $$(find $(HY_RESULTS) -name '*.log' | sort) </dev/null

test:
	@bash tools/deps.sh test
	@$(MAKE) --no-print-directory $(HY_JOBS) all hy-run-all
	@echo "== again under ASan+UBSan (build-asan/, CPU only) =="
	@$(MAKE) --no-print-directory $(HY_JOBS) $(HY_ASAN_VARS) all hy-run-all
	@echo "== the threaded tests again under TSan (build-tsan/) =="
	@$(MAKE) --no-print-directory $(HY_JOBS) $(HY_TSAN_VARS) hy-run-threaded
	@$(HY_TALLY) $$(find $(HY_RESULTS) build-asan/results build-tsan/results -name '*.log' | sort) </dev/null

# One test by its name: T=plan runs tests/test_plan.c (or test_plan.sh,
# test_plan.py) in build/ and shows its log when it fails, V=1 always.
# Add the sanitizer builds' variables to run it there, e.g.
#     make test-one T=runtime BUILD=build-tsan SANITIZE=thread NO_CUDA=1
HY_ONE_LOG = $(firstword $(filter %/test_$(T).log %/$(T).log,$(HY_UNIT_LOGS) $(HY_SCRIPT_LOGS)))
HY_TEST_NAMES = $(sort $(patsubst test_%,%,$(basename $(notdir $(HY_UNIT_LOGS) $(HY_SCRIPT_LOGS)))))

.PHONY: test-one hy-test-one
test-one:
	@bash tools/deps.sh test
	@$(MAKE) --no-print-directory $(HY_JOBS) hy-test-one

hy-test-one:
	@if [ -z "$(HY_ONE_LOG)" ]; then echo "make test-one T=NAME, NAME one of: $(HY_TEST_NAMES)" >&2; exit 2; fi
	@$(MAKE) --no-print-directory $(HY_JOBS) $(HY_ONE_LOG)
	@$(if $(filter 1,$(V)),cat $(HY_ONE_LOG);) $(HY_TALLY) $(HY_ONE_LOG) </dev/null

asan:
	@$(MAKE) --no-print-directory $(HY_ASAN_VARS) check

tsan:
	@$(MAKE) --no-print-directory $(HY_TSAN_VARS) check-unit

# ---------------------------------------------------------------------------
# Synthetic data for configs/tiny-gpt.json: its data.train and data.val, with
# its model.vocab (512). One tiny-gpt step reads micro_batches x
# micro_batch_size x seq_len = 8 x 4 x 64 = 2048 tokens, so 1M tokens cover
# its 200 steps without repeating. Made once, when absent (the binary is an
# order-only prerequisite: a rebuild does not rewrite them; the bytes depend
# only on the flags). `make clean` keeps data/; delete it to make them again.

HY_SYNTH_VOCAB ?= 512
HY_SYNTH_TOKENS ?= 1000000
HY_SYNTH_VAL_TOKENS ?= 100000
HY_SYNTH_DATA := data/synth_train.bin data/synth_val.bin

.PHONY: data
data: $(HY_SYNTH_DATA)

# One command writes both (&: — a grouped target — runs it once for the pair).
$(HY_SYNTH_DATA) &: | $(HY_BIN)
	@mkdir -p data
	$(HY_BIN) data synth --out data/synth_train.bin --tokens $(HY_SYNTH_TOKENS) \
	    --vocab $(HY_SYNTH_VOCAB) --val-out data/synth_val.bin --val-tokens $(HY_SYNTH_VAL_TOKENS)

# The two commands of the README install what they lack first
# (tools/deps.sh), then run make again so that what this parse did not find
# (jansson's library, say) is found.
run:
	@bash tools/deps.sh build
	@$(MAKE) --no-print-directory $(HY_JOBS) hy-train-tiny

.PHONY: hy-train-tiny
# --fresh: a second `make run` trains the demo again beside the first run's
# checkpoints, which a plain train refuses to mix with (docs/cli.md).
hy-train-tiny: all $(HY_SYNTH_DATA)
	$(HY_BIN) train configs/tiny-gpt.json --fresh

# ---------------------------------------------------------------------------
# Benchmarks: measured side by side in one run, printed (tools/bench.c).

BENCH_ARGS ?=
bench: $(HY_BENCH)
	$(HY_BENCH) $(BENCH_ARGS)

# ---------------------------------------------------------------------------
# Fuzzing: libFuzzer harnesses (tests/fuzz/fuzz_*.c) for the readers of
# files users hand us: the config loader, the token-shard reader, the
# safetensors reader, the tokenizer.json reader, Hugging Face's config.json
# reader and the model.safetensors.index.json reader (fuzz_index.c stands
# in for the three runtime functions weights.c also calls). Built with clang under ASan+UBSan in build-fuzz/, with
# their own archive of lib/*.c compiled with the fuzzer's coverage
# instrumentation (-fsanitize=fuzzer-no-link); the link takes from it only
# what the readers use (no kernels, no BLAS).
# tests/fuzz/run.sh makes the seeds and runs each harness for FUZZ_SECONDS.
# Without clang and its libFuzzer runtime the build stops at once saying so
# (Debian: clang and libclang-rt-N-dev; .ci/run installs them).

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 20
FUZZ_CFLAGS ?= -O1 -g
HY_FUZZ := build-fuzz
HY_FUZZ_NAMES := config shard safetensors tokenizer hfconfig index
HY_FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
HY_FUZZ_FLAGS = -D_GNU_SOURCE -Ilib $(HY_JANSSON_CFLAGS) -std=c11 -Wall -Wextra -Werror \
    $(FUZZ_CFLAGS) $(HY_FUZZ_SAN)
HY_FUZZ_LIB_OBJS := $(patsubst %.c,$(HY_FUZZ)/obj/%.o,$(wildcard lib/*.c))
HY_FUZZ_LIB := $(HY_FUZZ)/libhanayo-fuzz.a
HY_FUZZ_BINS := $(HY_FUZZ_NAMES:%=$(HY_FUZZ)/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz:
	@bash tools/deps.sh fuzz
	@$(MAKE) --no-print-directory fuzz-build
	@bash tests/fuzz/run.sh $(HY_FUZZ) $(FUZZ_SECONDS) $(HY_FUZZ_NAMES)

fuzz-build: $(HY_FUZZ_BINS)

# Rewritten when the compiler or flags change (so every object is rebuilt),
# and only after the compiler has shown it can link a libFuzzer program.
$(HY_FUZZ)/toolchain.ok: FORCE
	@mkdir -p $(HY_FUZZ)
	@want='$(FUZZ_CC) $(HY_FUZZ_FLAGS) | $(JANSSON_LIB)'; \
	if ! cmp -s <(printf '%s\n' "$$want") $@; then \
	    if ! command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	        echo "make fuzz: $(FUZZ_CC) not found; install clang with its libFuzzer runtime (Debian: apt-get install clang libclang-rt-N-dev, N = clang's major version; .ci/run does) or set FUZZ_CC" >&2; exit 1; fi; \
	    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }\n' | \
	        $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -x c - -o $(HY_FUZZ)/toolchain-check 2>$(HY_FUZZ)/toolchain-check.log || { \
	        echo "make fuzz: $(FUZZ_CC) cannot link a libFuzzer program (-fsanitize=fuzzer): its runtime is missing; install libclang-rt-N-dev, N = clang's major version (Debian; .ci/run does). The compiler said:" >&2; \
	        sed -n 1,5p $(HY_FUZZ)/toolchain-check.log >&2; exit 1; }; \
	    $(if $(JANSSON_LIB),,echo "make fuzz: libjansson.a not found: install libjansson-dev" >&2; exit 1;) \
	    printf '%s\n' "$$want" > $@; \
	fi

$(HY_FUZZ)/obj/%.o: %.c $(HY_FUZZ)/toolchain.ok
	@mkdir -p $(@D)
	$(FUZZ_CC) $(HY_FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

# Made afresh whenever an object changes (ar never drops a member itself).
$(HY_FUZZ_LIB): $(HY_FUZZ_LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(HY_FUZZ)/fuzz_%: $(HY_FUZZ)/obj/tests/fuzz/fuzz_%.o $(HY_FUZZ_LIB)
	$(FUZZ_CC) $(HY_FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(JANSSON_LIB) -lm

.SECONDARY: $(HY_FUZZ_NAMES:%=$(HY_FUZZ)/obj/tests/fuzz/fuzz_%.o)

-include $(shell find $(HY_FUZZ)/obj -name '*.d' 2>/dev/null)

clean:
	rm -rf build build-asan build-tsan $(HY_FUZZ)

FORCE:
