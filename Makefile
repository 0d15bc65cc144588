# Sluice: GPU virtualization for VMs. `make help` lists the targets.

SHELL        := /bin/bash
GO           ?= go
BIN          := bin
VERSION      ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -s -w -X github.com/sluice-gpu/sluice/mediator/internal/daemon.Version=$(VERSION) \
                -X github.com/sluice-gpu/sluice/controller/internal/cli.Version=$(VERSION) \
                -X main.version=$(VERSION)
GOBUILD      := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME     ?= 3s
DEMO_SECONDS ?= 20
BENCHTIME    ?= 2s
# The test targets first install what their tests need (deploy/test-deps.sh);
# DEPS=0 leaves that out. A test that lacks a tool fails, unless
# SLUICE_ALLOW_MISSING names its package (or is all): then it skips, and the
# summary at the end lists it. TESTOUT keeps the runs' reports for that summary.
DEPS         ?= 1
TESTOUT      ?= build/test
TESTSUMMARY  := $(GO) run ./internal/testsummary/cmd/testsummary

.PHONY: help generate build sluiced sluice-proxy ptx sluicectl sluice-controller sluice-agent sluice-init sluice-libvirt-hook guest-image deps test unit fuzz vet lint demo bench bench-gpu clean

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: sluiced sluice-proxy sluicectl sluice-controller sluice-agent sluice-init sluice-libvirt-hook ## build every binary into bin/ (static, no cgo)

generate: ## regenerate the controller API's Go code from api/controllerapi/openapi.yaml (oapi-codegen, pinned in go.mod)
	$(GO) generate ./api/controllerapi

sluiced: ## build the mediator daemon
	$(GOBUILD) -o $(BIN)/sluiced ./mediator/cmd/sluiced

sluice-proxy: ## build the per-VM system-call proxy (sluiced starts one per VM, from beside its own binary)
	$(GOBUILD) -o $(BIN)/sluice-proxy ./mediator/cmd/sluice-proxy

ptx: ## regenerate guest-agent/kernels/sluice_kernels.ptx from its source (needs clang with the NVPTX target; no CUDA toolkit)
	guest-agent/kernels/gen.sh

sluicectl: ## build the operator CLI
	$(GOBUILD) -o $(BIN)/sluicectl ./controller/cmd/sluicectl

sluice-controller: ## build the fleet controller (REST API, SQLite or PostgreSQL)
	$(GOBUILD) -o $(BIN)/sluice-controller ./controller/cmd/sluice-controller

sluice-agent: ## build the guest agent
	$(GOBUILD) -o $(BIN)/sluice-agent ./guest-agent/cmd/sluice-agent

sluice-init: ## build the guest image's /init
	$(GOBUILD) -o $(BIN)/sluice-init ./guest-agent/cmd/sluice-init

GUEST_DIR    ?= build/guest
sluice-libvirt-hook: ## build the libvirt qemu hook (deploy/install-libvirt-hook.sh installs it)
	$(GOBUILD) -o $(BIN)/sluice-libvirt-hook ./vmm-plugin/cmd/sluice-libvirt-hook

guest-image: sluice-agent sluice-init ## kernel + initramfs for QEMU guests into $(GUEST_DIR) (needs linux-image-amd64, cpio)
	deploy/guest-image.sh $(GUEST_DIR) $(BIN)

deps: ## check what the tests need; as root install what is missing (Debian packages, schemathesis), else say what to run
	GO=$(GO) deploy/test-deps.sh

# The test targets' first prerequisite: deps, unless DEPS=0.
TESTDEPS     := $(if $(filter 1,$(DEPS)),deps)

test: $(TESTDEPS) vet unit fuzz e2e ## deps, vet, unit and integration tests with -race, short fuzz runs, the e2e suite; then every test that did not run, and why
	@$(TESTSUMMARY) report $(TESTOUT)/unit.json $(TESTOUT)/e2e.json

vet: ## go vet and gofmt
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt needed: $$fmt"; exit 1; fi
	$(GO) vet ./...

unit: $(TESTDEPS) ## unit and integration tests (with the race detector; the e2e suite runs on its own: make e2e); then the tests that did not run
	@mkdir -p $(TESTOUT)
	set -o pipefail; $(GO) test -json -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/e2e$$') \
	  | tee $(TESTOUT)/unit.json | $(TESTSUMMARY) filter

fuzz: ## run every fuzz target for FUZZTIME (default 3s); a finding fails, an engine hiccup is retried once
	GO=$(GO) FUZZTIME=$(FUZZTIME) deploy/fuzz.sh

.PHONY: e2e
e2e: $(TESTDEPS) ## end-to-end suite: real binaries, QEMU guests, libvirtd (E2E_LABELS=process|qemu|libvirt selects by label); then the specs that did not run
	@mkdir -p $(TESTOUT)
	$(GO) test -count=1 -timeout 15m ./e2e/ -v -args -ginkgo.v -ginkgo.json-report=$(abspath $(TESTOUT))/e2e.json $(if $(E2E_LABELS),-ginkgo.label-filter='$(E2E_LABELS)')
	@$(TESTSUMMARY) report $(TESTOUT)/e2e.json

lint: vet ## go vet, gofmt and staticcheck
	$(GO) run $(STATICCHECK) ./...

demo: build ## two process guests (10x kernel skew) on the simulated GPU, unscheduled then under dfq, summed up side by side (DEMO_SECONDS=20, both phases)
	DEMO_SECONDS=$(DEMO_SECONDS) BIN=$(BIN) deploy/demo.sh

bench: sluicectl ## run the Go benchmarks and every bench/specs/*.yaml; JSON and tables into bench/results/
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -json ./... > bench/results/go-bench.json
	$(GO) run ./bench/cmd/benchsummary < bench/results/go-bench.json | tee bench/results/README.md
	@set -e; out=; for spec in bench/specs/*.yaml; do \
	  name=$$(basename $$spec .yaml); echo "bench spec $$name"; \
	  $(BIN)/sluicectl bench run --json $$spec > bench/results/$$name.json; \
	  out="$$out bench/results/$$name.json"; \
	done; \
	$(GO) run ./bench/cmd/benchtable $$out > bench/results/specs.md
	@echo "wrote bench/results/specs.md"

GPU_RESULTS ?= bench/results/h100

bench-gpu: build ## on an NVIDIA GPU machine: the cuda backend's GPU tests, bench/specs-gpu and the GPU system calls into GPU_RESULTS
	SLUICE_REQUIRE_GPU=1 CGO_ENABLED=0 $(GO) test -count=1 -run GPU -v ./mediator/backend/cuda
	bench/gpu/run.sh $(BIN)/sluicectl $(GPU_RESULTS)
	bench/gpu/syscalls.sh $(BIN) $(GPU_RESULTS)
	$(GO) run ./bench/cmd/benchtable $(filter-out $(GPU_RESULTS)/syscalls%,$(wildcard $(GPU_RESULTS)/*.json)) > $(GPU_RESULTS)/specs.md
	@echo "wrote $(GPU_RESULTS)/specs.md"

clean: ## remove build outputs
	rm -rf $(BIN)
