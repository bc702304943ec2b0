# Cohort: Qwen3.5 tensor-parallel serving in Go. `make help` lists the targets.
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 4s
RACE_PKGS := ./kernels/... ./model/... ./nccl/... ./actors/...

.PHONY: help run test check vet fmt-check tidy-check unit race fuzz bench build fixtures

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## generate text with the built-in tiny model on the CPU (no GPU, no network)
	$(GO) run ./cmd/cohort generate --prompt "Hello, Cohort" --max-tokens 24

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

fuzz: ## each fuzz target for $(FUZZTIME)
	$(GO) test -run='^$$' -fuzz='^FuzzParseHeader$$' -fuzztime=$(FUZZTIME) ./model/safetensors
	$(GO) test -run='^$$' -fuzz='^FuzzParseConfig$$' -fuzztime=$(FUZZTIME) ./model
	$(GO) test -run='^$$' -fuzz='^FuzzEncode$$' -fuzztime=$(FUZZTIME) ./model/tokenizer
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./model/tokenizer
	$(GO) test -run='^$$' -fuzz='^FuzzPlanner$$' -fuzztime=$(FUZZTIME) ./actors/planner

bench: ## benchmarks, once each (side-by-side baselines print ratios)
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=1 ./kernels/... ./model/... ./nccl/... ./actors/...

fixtures: ## regenerate HF reference fixtures (run on the GPU machine; see tools/hfref)
	python3 tools/hfref/make_fixtures.py --out testdata/hf
