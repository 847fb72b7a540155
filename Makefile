# pgadvisory — the commands the README promises. `make help` lists them.
GO       ?= go
GOFLAGS  ?=
TIMEOUT  ?= 30m
TESTFLAGS ?=
# The repository's modules, as go.work lists them ("." is the library).
MODULES  ?= $(shell $(GO) work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
# each RECIPE: run the shell RECIPE in every module's directory, all of
# them even when one fails, and fail if any did.
each = status=0; for m in $(MODULES); do echo "== module $$m"; (cd $$m && $(1)) || status=1; done; exit $$status

.PHONY: help demo test test-nocgo test-unit lint budget bench bench-go faults pgx-suites toolcheck river

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

demo: ## the main job: double payments through PgBouncer, then pgadvisory preventing them
	$(GO) run ./cmd/pgadvisory demo

test: ## unit and integration tests of every module (starts PostgreSQL and PgBouncer through the harness)
	@$(call each,$(GO) test $(GOFLAGS) $(TESTFLAGS) -race -count=1 -shuffle=on -timeout $(TIMEOUT) ./...)

test-nocgo: ## lockscan and advisory built without cgo (the WebAssembly parser): the same results as with cgo
	CGO_ENABLED=0 $(GO) test $(GOFLAGS) $(TESTFLAGS) -count=1 -timeout 40m ./lockscan/... ./advisory/...

test-unit: ## unit tests of every module only, no servers
	@$(call each,$(GO) test $(GOFLAGS) -short -race -count=1 -shuffle=on ./...)

lint: ## gofmt; per module go vet, a standalone build and go mod tidy -diff; pgadvisoryvet over every module; the vettool golden test
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(call each,$(GO) vet ./... && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) mod tidy -diff)
	$(GO) run ./lint/cmd/pgadvisoryvet -test=false $(patsubst %,%/...,$(MODULES))
	sh lint/vetgolden.sh

budget: ## what adopting the library costs a program: modules, binary sizes with both parsers, builds without cgo
	bash scripts/budget.sh

bench: ## the lock benchmark: naive pattern, WithXactLock over pgx and pgadvisory, Redlock (out/bench.md, out/bench.svg)
	@mkdir -p out
	$(GO) run ./cmd/pgadvisory bench -rounds 2 -out out/bench.md -svg out/bench.svg -cpuprofile out/bench-cpu.pprof

bench-go: ## Go benchmarks of the driver against pgx stdlib (then: benchstat -col /driver out/bench-go.txt)
	@mkdir -p out
	$(GO) test -run '^$$' -bench 'Loopback|Intercept|LockCycle' -benchmem -count 10 . | tee out/bench-go.txt

faults: ## run the fault-injection tests and print their results as the README's table
	@rm -f out/faults.jsonl; mkdir -p out
	PGADVISORY_FAULT_REPORT=$(CURDIR)/out/faults.jsonl $(GO) test -count=1 -run 'TestFault' ./cmd/pgadvisory/internal/settle/
	@$(GO) run ./cmd/pgadvisory/internal/settle/faulttable out/faults.jsonl

PGXSUITE_FLAGS ?= -out out/pgx-suites
pgx-suites: ## pgx's own stdlib and pgxpool tests, plain and through pgadvisory (direct and PgBouncer session); fails on a regression
	$(GO) run ./cmd/pgadvisory/internal/pgxsuite $(PGXSUITE_FLAGS)

toolcheck: ## golang-migrate, goose and tern from three processes through PgBouncer under policy hold (module toolcheck/, also run by make test)
	cd toolcheck && $(GO) test $(GOFLAGS) $(TESTFLAGS) -timeout 20m -count=1 ./...

river: ## River v0.51 (riverpgxv5 and riverdatabasesql) migrates and works jobs through PgBouncer transaction pooling, default policy and hold (module toolcheck/; CI runs it with make test)
	cd toolcheck && $(GO) test $(GOFLAGS) $(TESTFLAGS) -timeout 10m -count=1 -run 'TestRiver' .
