# Cohort: Qwen3.5 tensor-parallel serving in Go. `make help` lists the targets.
GO       ?= go
PKGS     := ./...
# Fuzz budgets are execution counts, not durations: a duration -fuzztime races
# the coordinator's deadline in Go 1.26 and fails spuriously with
# "context deadline exceeded" (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
# The race detector runs on the packages with goroutines; the planner, the
# prefix index, the sampler and the chat-template, reasoning and tool-call
# parsers are pure, neither they nor their tests start one (their tests run
# in the unit pass; their code runs concurrently in the engine's tests).
RACE_PURE = cohort/actors/planner cohort/actors/prefix cohort/model/sample \
	cohort/httpapi/chattemplate cohort/httpapi/reasoning cohort/httpapi/toolcall
# The engine's packages come first: go test starts the test binaries in this
# order, and cohort/actors (the longest) then runs beside all the others.
RACE_PKGS = $(filter-out $(RACE_PURE),$(shell $(GO) list ./actors/... ./httpapi/... ./model/... ./nccl/... ./kernels/... ./supervision/...))

.PHONY: help run test check vet fmt-check tidy-check unit race fuzz bench build fixtures proto tracecheck

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

ARGS ?=
run: ## serve the built-in tiny model on http://127.0.0.1:8000 (OpenAI API, CPU); ARGS='--port 8001 --model DIR' passes flags to cohort serve
	$(GO) run ./cmd/cohort serve $(ARGS)

build: ## build bin/cohort (CPU)
	$(GO) build -o bin/cohort ./cmd/cohort

test: check vet-cuda unit race fuzz bench tracecheck ## everything CI runs

check: vet fmt-check tidy-check ## static checks

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check:
	$(GO) mod tidy -diff

unit: ## unit tests (short mode keeps heavy suites small)
	$(GO) test -short -count=1 $(PKGS)

race: ## race detector on the concurrent packages
	$(GO) test -race -short -count=1 $(RACE_PKGS)

fuzz: ## each fuzz target for $(FUZZTIME) executions
	$(GO) test -run='^$$' -fuzz='^FuzzParseHeader$$' -fuzztime=$(FUZZTIME) ./model/safetensors
	$(GO) test -run='^$$' -fuzz='^FuzzParseConfig$$' -fuzztime=$(FUZZTIME) ./model
	$(GO) test -run='^$$' -fuzz='^FuzzEncode$$' -fuzztime=$(FUZZTIME) ./model/tokenizer
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./model/tokenizer
	$(GO) test -run='^$$' -fuzz='^FuzzPlanner$$' -fuzztime=$(FUZZTIME) ./actors/planner
	$(GO) test -run='^$$' -fuzz='^FuzzCompletionRequest$$' -fuzztime=$(FUZZTIME) ./httpapi
	$(GO) test -run='^$$' -fuzz='^FuzzChatRequest$$' -fuzztime=$(FUZZTIME) ./httpapi
	$(GO) test -run='^$$' -fuzz='^FuzzResponsesRequest$$' -fuzztime=$(FUZZTIME) ./httpapi
	$(GO) test -run='^$$' -fuzz='^FuzzParser$$' -fuzztime=$(FUZZTIME) ./httpapi/toolcall
	$(GO) test -run='^$$' -fuzz='^FuzzSplit$$' -fuzztime=$(FUZZTIME) ./httpapi/reasoning
	$(GO) test -run='^$$' -fuzz='^FuzzParseGenerationConfig$$' -fuzztime=$(FUZZTIME) ./model
	$(GO) test -run='^$$' -fuzz='^FuzzJSONSchema$$' -fuzztime=$(FUZZTIME) ./model/grammar
	$(GO) test -run='^$$' -fuzz='^FuzzRegex$$' -fuzztime=$(FUZZTIME) ./model/grammar
	$(GO) test -run='^$$' -fuzz='^FuzzEBNF$$' -fuzztime=$(FUZZTIME) ./model/grammar

bench: ## benchmarks, once each (side-by-side baselines print ratios)
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 ./kernels/... ./model/... ./nccl/... ./actors/... ./httpapi/...

# tools/tracecheck is its own Go module (the collector's dependencies stay
# out of go.mod): an OpenTelemetry Collector built from its Go modules runs in
# the test process, cohort serve (bin/cohort) exports to it over loopback.
tracecheck: build ## a real OpenTelemetry Collector: one streamed chat with --tp 2 exported to it, the stored trace checked
	cd tools/tracecheck && $(GO) vet ./... && $(GO) mod tidy -diff
	cd tools/tracecheck && COHORT_BIN=$(CURDIR)/bin/cohort $(GO) test -count=1 ./...

fixtures: ## regenerate HF reference fixtures (run on the GPU machine; see tools/hfref)
	python3 tools/hfref/make_fixtures.py --out testdata/hf
	python3 tools/hfref/make_fixtures.py --qwen3 testdata/hf-qwen3/qwen3-tiny

.PHONY: build-cuda vet-cuda
# The cuda build needs the CUDA headers and, to link libcuda (gorgonia.org/cu),
# a libcuda.so (the toolkit's stub or a driver's); NVRTC, cuBLASLt and NCCL are opened with dlopen
# at run time. tools/cuda/cuda-headers.sh finds or fetches both (no GPU needed).
CUDA_ENV = CGO_ENABLED=1 CGO_CFLAGS="-I$$(./tools/cuda/cuda-headers.sh)" CGO_LDFLAGS="-L$$(./tools/cuda/cuda-headers.sh --lib)"

build-cuda: ## build bin/cohort and bin/cuda.test with the CUDA backend (-tags cuda; fetches the CUDA headers and a libcuda.so if missing)
	$(CUDA_ENV) $(GO) vet -tags cuda ./kernels/cuda/ ./nccl/
	$(CUDA_ENV) $(GO) build -tags cuda -o bin/cohort ./cmd/cohort
	$(CUDA_ENV) $(GO) test -c -tags cuda -o bin/cuda.test ./kernels/cuda/

vet-cuda: ## compile and vet the cuda build, tests included (no GPU needed)
	@inc=$$(./tools/cuda/cuda-headers.sh) && lib=$$(./tools/cuda/cuda-headers.sh --lib) || { echo "vet-cuda: SKIPPED: the CUDA headers and libcuda.so could not be fetched (tools/cuda/cuda-headers.sh failed)" >&2; exit 0; }; \
	echo "CGO_ENABLED=1 CGO_CFLAGS=-I$$inc CGO_LDFLAGS=-L$$lib $(GO) vet -tags cuda ./..."; \
	CGO_ENABLED=1 CGO_CFLAGS="-I$$inc" CGO_LDFLAGS="-L$$lib" $(GO) vet -tags cuda ./...

# The generated code is committed: CI and `make test` never need protoc.
PROTOC_GEN_GO_VERSION := $(shell $(GO) list -m -f '{{.Version}}' google.golang.org/protobuf)
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin

proto: ## regenerate actors/remote/rankpb from rank.proto (installs protoc from Debian, protoc-gen-go from the Go proxy if missing)
	@command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	@test -x $(GOBIN_DIR)/protoc-gen-go || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH="$(GOBIN_DIR):$$PATH" protoc --go_out=. --go_opt=module=cohort -I actors/remote/rankpb actors/remote/rankpb/rank.proto
