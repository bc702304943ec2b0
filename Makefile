# Cohort: Qwen3.5 tensor-parallel serving in Go. `make help` lists the targets.
GO       ?= go
PKGS     := ./...
# Fuzz budgets are execution counts, not durations: a duration -fuzztime races
# the coordinator's deadline in Go 1.26 and fails spuriously with
# "context deadline exceeded" (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
RACE_PKGS := ./kernels/... ./model/... ./nccl/... ./actors/... ./supervision/... ./httpapi/...

.PHONY: help run test check vet fmt-check tidy-check unit race fuzz bench build fixtures

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## serve the built-in tiny model on http://127.0.0.1:8000 (OpenAI API, CPU, no network)
	$(GO) run ./cmd/cohort serve

build: ## build bin/cohort (CPU)
	$(GO) build -o bin/cohort ./cmd/cohort

test: check unit race fuzz bench ## everything CI runs

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

bench: ## benchmarks, once each (side-by-side baselines print ratios)
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 ./kernels/... ./model/... ./nccl/... ./actors/... ./httpapi/...

fixtures: ## regenerate HF reference fixtures (run on the GPU machine; see tools/hfref)
	python3 tools/hfref/make_fixtures.py --out testdata/hf

.PHONY: build-cuda
build-cuda: ## build bin/cohort and bin/cuda.test with the CUDA backend (-tags cuda; installs the CUDA headers if missing)
	./tools/cuda/install-cuda-dev.sh
	CGO_ENABLED=1 $(GO) vet -tags cuda ./kernels/cuda/
	CGO_ENABLED=1 $(GO) build -tags cuda -o bin/cohort ./cmd/cohort
	CGO_ENABLED=1 $(GO) test -c -tags cuda -o bin/cuda.test ./kernels/cuda/
