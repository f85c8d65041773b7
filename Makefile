# swetui's build and test entry points. `make test` is the test command CI runs.
GO ?= go
PKGS := ./...

.PHONY: build build-blas test check setup bench gpu-check cuda-lint cuda-emu warmstart warmstart-agent learn-report

# The default build is pure Go; build-blas links OpenBLAS (Debian's
# libopenblas-dev, cgo) for about 4x faster training on CPU.
# The version is git describe's (swetui version and the console show it).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/swetui/swetui/cli.Version=$(VERSION)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o swetui .

build-blas:
	CGO_ENABLED=1 $(GO) build -tags blas -ldflags '$(LDFLAGS)' -o swetui .

setup:
	bash .ci/setup

.PHONY: cluster-up cluster-down

# Brings up the single-node Kubernetes test cluster on loopback (idempotent; builds its binaries first).
cluster-up:
	bash .ci/k8s/up.sh

# Stops the test cluster and deletes its state (keeps the built binaries and images).
cluster-down:
	bash .ci/k8s/down.sh --purge

# Static checks, every test (integration tests use the Docker Engine and the
# images `make setup` builds), then the model again on the OpenBLAS build.
# The CUDA emulator is built first: model/cuda's GPU tests and a device run
# in cli run the engine's real path on it, and the engine's own tests (LoRA,
# the bf16 base, recomputation, sampling, the policy's steps) run a second
# time on it. The OpenBLAS pass leaves the emulator's tests out: they do not
# touch the host GEMM.
EMU_ENGINE_TESTS := TestLoRA|TestBF16|TestRecompute|TestPolicy|TestEngine|TestSample
# The per-package bound is cli's: on a 2-core CI box with the test
# cluster up and the other packages' containers beside it, cli ran past
# 40 minutes (TestRealReposDataset was at work); the whole run stays under
# CI's 90.
test: check cuda-emu
	$(GO) test -count=1 -timeout 80m $(PKGS)
	SWETUI_TEST_DEVICE=emu $(GO) test -count=1 -run '$(EMU_ENGINE_TESTS)' ./model/cuda/
	CGO_ENABLED=1 $(GO) test -count=1 -tags blas -skip 'TestGPU|TestEmulat|TestNCCL' ./model/...

check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	CGO_ENABLED=1 $(GO) vet -tags blas ./model/...

# The default model's speed: pure Go, OpenBLAS and PyTorch side by side
# (interleaved rounds, ranges; ROUNDS=n for more). PyTorch is Debian's
# python3-torch; without it that column is n/a.
bench:
	GO=$(GO) /usr/bin/python3 model/testdata/bench_table.py

# The device check: builds here what a GPU machine without Go runs (the
# model/cuda test binary, pure Go, and the scripts of
# model/cuda/devicecheck). There: bash gpucheck-bundle/run.sh, results in
# $$OUT (default gpucheck-bundle/out), summary.md first.
gpu-check:
	rm -rf gpucheck-bundle && mkdir -p gpucheck-bundle
	CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o gpucheck-bundle/cuda.test ./model/cuda
	cp model/cuda/devicecheck/run.sh model/cuda/devicecheck/*.py model/cuda/devicecheck/*.json gpucheck-bundle/
	@du -sh gpucheck-bundle

# The CUDA emulator (model/cuda/emu): libcuda.so.1, libnvrtc.so.12 and
# libcublas.so.12 for the CPU, built with the host's C++ compiler into
# build/cudaemu. model.cuda_libs=build/cudaemu (or SWETUI_CUDA_LIBS) runs
# the GPU engine's real path on them: docs/gpu.md#the-emulator.
CUDAEMU := build/cudaemu
CUDAEMU_SRC := model/cuda/emu
CUDAEMU_CXX ?= c++
CUDAEMU_FLAGS := -std=c++17 -O2 -g -fPIC -shared -Wall -Wextra -Wno-unused-parameter
cuda-emu: $(CUDAEMU)/libcuda.so.1 $(CUDAEMU)/libnvrtc.so.12 $(CUDAEMU)/libcublas.so.12 $(CUDAEMU)/libnccl.so.2

$(CUDAEMU)/libcuda.so.1: $(CUDAEMU_SRC)/driver.cc $(CUDAEMU_SRC)/fiber.cc $(CUDAEMU_SRC)/elf.cc $(wildcard $(CUDAEMU_SRC)/*.h)
	@mkdir -p $(CUDAEMU)
	$(CUDAEMU_CXX) $(CUDAEMU_FLAGS) -Wl,-soname,libcuda.so.1 -o $@ $(filter %.cc,$^) -ldl

$(CUDAEMU)/libnvrtc.so.12: $(CUDAEMU_SRC)/nvrtc.cc $(CUDAEMU_SRC)/elf.cc $(wildcard $(CUDAEMU_SRC)/*.h)
	@mkdir -p $(CUDAEMU)
	$(CUDAEMU_CXX) $(CUDAEMU_FLAGS) -DCUDAEMU_HEADER='"$(CURDIR)/$(CUDAEMU_SRC)/cudaemu_device.h"' -Wl,-soname,libnvrtc.so.12 -o $@ $(filter %.cc,$^)

$(CUDAEMU)/libcublas.so.12: $(CUDAEMU_SRC)/cublas.cc $(CUDAEMU)/libcuda.so.1 $(wildcard $(CUDAEMU_SRC)/*.h)
	$(CUDAEMU_CXX) $(CUDAEMU_FLAGS) -Wl,-soname,libcublas.so.12 -o $@ $(filter %.cc,$^) -L$(CUDAEMU) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN'

$(CUDAEMU)/libnccl.so.2: $(CUDAEMU_SRC)/nccl.cc $(CUDAEMU)/libcuda.so.1 $(wildcard $(CUDAEMU_SRC)/*.h)
	$(CUDAEMU_CXX) $(CUDAEMU_FLAGS) -Wl,-soname,libnccl.so.2 -o $@ $(filter %.cc,$^) -L$(CUDAEMU) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN' -lpthread

# Compiles the CUDA kernels to PTX with clang (apt-get install clang; no
# CUDA toolkit needed) for each head size and both precisions: the syntax
# and type check available without a GPU. Not part of `make test`.
cuda-lint:
	@for bf in 0 1; do for hd in 8 16 32 64 128 256; do \
	  cat model/cuda/devicecheck/clang_prelude.h model/cuda/kernels.cu | clang -x cuda --cuda-gpu-arch=sm_80 \
	    -nocudainc -nocudalib --cuda-device-only -S -O2 -Wall -Werror -DSWETUI_BF16=$$bf -DSWETUI_HD=$$hd -o /dev/null - \
	    || exit 1; done; done; echo "kernels.cu compiles (clang, sm_80, bf16 0/1, head sizes 8-256)"

# The warm start shipped for the embedded suite (package warmstart): trained
# offline from the train split only, for WARMSTART_STEPS steps, with the
# default config otherwise; the same commit, build and machine give the same
# bytes. A test fails when the suite, the prompts, the tokenizer or the
# model's defaults change without this being run again.
WARMSTART_STEPS ?= 2400
warmstart:
	rm -rf .warmstart-build
	$(GO) run . sft run.out_dir=.warmstart-build sft.steps=$(WARMSTART_STEPS) --export warmstart/shipped
	rm -rf .warmstart-build

# Agent mode's shipped warm start (warmstart/shipped-agent): the single-shot
# one trained further on the scripted expert's trajectories, played in
# sessions on the local Docker Engine, at agent mode's context.
WARMSTART_AGENT_STEPS ?= 400
warmstart-agent:
	rm -rf .warmstart-build
	$(GO) run . sft rollout.mode=agent model.init_ckpt=warmstart/shipped run.out_dir=.warmstart-build \
	  sft.steps=$(WARMSTART_AGENT_STEPS) --export warmstart/shipped-agent
	rm -rf .warmstart-build

# What the default curriculum teaches on the held-out split, two seeds
# (train/testdata/learn_report.py: STEPS, SEEDS, SAMPLES, MODE, PHASE,
# OVERRIDES, OUT). About an hour on 2 cores with the defaults.
learn-report:
	GO=$(GO) /usr/bin/python3 train/testdata/learn_report.py
