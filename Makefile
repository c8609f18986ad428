# Quick start: `make run` (installs what is missing, builds the library, the tools and the emulated
# device plug-in, runs a 4-rank collective benchmark against the write bound, REPEATS times) and
# `make test` (everything).
BUILD ?= build
JOBS ?= $(shell nproc)
RANKS ?= 4
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
# make test compiles the CUDA kernels whenever nvcc is there (CI checks them without a GPU);
# `make test CUDA=OFF` skips them. make run decides for itself (scripts/run.sh).
CUDA ?= AUTO
# Without a GPU, make test only checks that the kernels compile: PTX only (90-virtual, no ptxas
# pass) and unoptimized (LOOM_CUDA_CHECK_ONLY: -Xcicc -O0), 4 minutes less on 2 cores. With a
# GPU, CMake's default (SASS for sm_90 and its PTX), optimized.
NO_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q 'GPU ' || echo 1)
CUDA_ARCHS ?= $(if $(NO_GPU),90-virtual)
CUDA_CHECK_ONLY ?= $(if $(NO_GPU),ON,OFF)
# Unity build: each target's C++ files compiled in batches of 8, their shared headers parsed once
# a batch (a fresh build takes ~35 % less CPU: the library's objects half, the tests' a third).
# UNITY=OFF compiles file by file (an edit then recompiles one file, not its batch).
UNITY ?= ON

.PHONY: all deps build run test test-torch-full bench bench-multinode test-asan test-tsan soak cycles fuzz format clean

all: build

deps:
	@scripts/install_deps.sh

build: deps
	scripts/nccl_header.sh $(BUILD)/_deps/nccl
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=$(CUDA) \
	  -DLOOM_CUDA_CHECK_ONLY=$(CUDA_CHECK_ONLY) $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)) \
	  -DCMAKE_UNITY_BUILD=$(UNITY)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: allreduce and allgather across $(RANKS) local ranks, results checked, against the
# write bound, the median of REPEATS (3) runs with their spread. Builds what `cmake --install`
# installs and the README's tools (CMake target loom-quickstart), no tests; CUDA only where a GPU is.
run:
	@BUILD=$(BUILD) RANKS=$(RANKS) JOBS=$(JOBS) UNITY=$(UNITY) scripts/run.sh

# The sanitizer slot of this commit (scripts/sanitize.sh: the slots rotate, so that CI's runs
# cover the C++ tests under ASan+UBSan, but for the long slots `make test-asan` runs, and the
# threaded ones under TSan) builds and runs beside the Python tests (scripts/beside.sh);
# SANITIZE=0 skips it.
# ctest runs one test more than there are cores: the multi-rank tests wait on each other part of
# the time (2-core VM, 141 tests: 450 s at -j 2, 405 s at -j 3, both cores busy throughout).
test: build
	cd $(BUILD) && ctest -j $$(($(JOBS) + 1)) --output-on-failure --timeout 1800
	$(if $(filter 0,$(SANITIZE)),,scripts/beside.sh "JOBS=$(JOBS) scripts/sanitize.sh ci") \
	  scripts/python_test.sh
	BUILD=$(BUILD) scripts/newcomer_check.sh

# Opt-in, not in `make test` (an hour or more on 2 cores): PyTorch's whole _DistTestBase on Gloo
# and on Loom at 2, 3 and 4 ranks (WORLDS=...), ranks spawned as PyTorch does, the torch
# point-to-point stress at 1000 iterations, and the point-to-point and graph-pass tests at the
# world sizes CI leaves out (LOOM_TEST_WIDE_WORLDS=1: 4 and 5 ranks, 4 pipeline stages, 6 ranks).
test-torch-full:
	LOOM_DIST_SUITE_SELECT= LOOM_DIST_SUITE_WORLDS=$(or $(WORLDS),2,3,4) \
	  scripts/python_test.sh tests/python/test_torch_dist_suite.py -s
	LOOM_TEST_WIDE_WORLDS=1 LOOM_P2P_STRESS_ITERS=1000 scripts/python_test.sh \
	  tests/python/test_torch_p2p.py tests/python/test_graph_passes.py -s

# Loom vs Open MPI (and Gloo where torch is installed) and the write bound, side by side: tables
# and one plot per collective (bench/plot.py) beside the CSV in bench/results/.
bench:
	@BUILD=$(BUILD) JOBS=$(JOBS) scripts/run.sh --build-only
	@scripts/install_deps.sh bench
	bench/run_cpu.sh $(shell n=$$(nproc); [ $$n -lt 2 ] && n=2; echo $$n) $(or $(MAXBYTES),256M)

# Two "nodes" as network namespaces (root): TCP bound, Open MPI and Loom per algorithm.
bench-multinode: build
	bench/run_multinode.sh $(if $(ALGOS),-a "$(ALGOS)") $(or $(MAXBYTES),256M)

# Every C++ test under ASan+UBSan (every ASan slot of scripts/sanitize.sh, one build tree at -O1:
# all but the GPU tests and the shim's fallback, which loads a real NCCL the runtime refuses).
test-asan: deps
	JOBS=$(JOBS) scripts/sanitize.sh all asan

# The tests that use threads under ThreadSanitizer (every TSan slot of scripts/sanitize.sh), and
# the torch backend's worker and async work (scripts/tsan_torch.sh: skipped without torch).
test-tsan: deps
	JOBS=$(JOBS) scripts/sanitize.sh all tsan
	JOBS=$(JOBS) scripts/tsan_torch.sh

# Opt-in, not in `make test`: the chaos soak (tests/soak/soak.py: random jobs, each with a random
# fault; what must hold is checked per job). SOAK_JOBS jobs, one at a time, at most SOAK_MINUTES;
# netns transports and packet loss only as root (else left out, said so). SOAK_ARGS: more flags.
SOAK_JOBS ?= 200
SOAK_MINUTES ?= 30
soak: build
	tests/soak/soak.py --build $(BUILD) --jobs $(SOAK_JOBS) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# Opt-in, not in `make test`: CYCLES (10,000) communicators made and destroyed one after another
# on 2 ranks through the C API, Python and torch (tests/soak/cycles.py): memory, descriptors and
# threads after the warm-up and at the end.
CYCLES ?= 10000
cycles: build
	LOOM_INSTALL_ONLY=1 scripts/python_test.sh
	$${LOOM_VENV:-.venv}/bin/python tests/soak/cycles.py --build $(BUILD) --cycles $(CYCLES)

# Opt-in: the fuzz targets as libFuzzer binaries (clang, coverage, ASan+UBSan) in $(BUILD_FUZZ);
# each runs FUZZ_SECONDS. `make test` runs them with the bounded random driver instead.
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DLOOM_CUDA=OFF -DLOOM_FUZZ=ON -DLOOM_SANITIZE=address,undefined
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target $(addprefix fuzz_,bootstrap rudp loomrun_wire env channel_header json)
	for t in bootstrap rudp loomrun_wire env channel_header json; do \
	  mkdir -p $(BUILD_FUZZ)/corpus/$$t && \
	  $(BUILD_FUZZ)/tests/fuzz/fuzz_$$t $(BUILD_FUZZ)/corpus/$$t -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cu')

clean:
	rm -rf $(BUILD) build-sanitize-asan build-sanitize-tsan build-sanitize-tsan-python
