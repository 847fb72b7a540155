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

.PHONY: help demo test test-docker test-nocgo test-unit lint budget bench bench-docs bench-goals instructions syscalls bench-go faults pgx-suites toolcheck river release-check lab examples

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The lab command (module lab/): the demo and the benchmarks. Its first build
# compiles libpg_query (C, through cgo) for minutes; say so before it starts.
LAB := out/pgadvisory-lab
lab: ## build the lab command (demo, bench) into out/pgadvisory-lab
	@mkdir -p out
	@if [ "$$($(GO) list -f '{{.Stale}}' github.com/pganalyze/pg_query_go/v6 2>/dev/null)" != false ]; then \
		echo "== building pgadvisory-lab: the first build compiles libpg_query (C) through cgo, ~2 minutes on 2 cores"; fi
	$(GO) build -o $(LAB) ./lab/cmd/pgadvisory-lab

demo: lab ## the main job: double payments through PgBouncer, then pgadvisory preventing them
	$(LAB) demo

test: ## unit and integration tests of every module (starts PostgreSQL and PgBouncer through the harness)
	@$(call each,$(GO) test $(GOFLAGS) $(TESTFLAGS) -race -count=1 -shuffle=on -timeout $(TIMEOUT) ./...)

test-docker: ## integration tests on the Docker back end with a locally built Debian image (needs a Docker engine; see docs/docker.md)
	GO=$(GO) TIMEOUT=$(TIMEOUT) TESTFLAGS="$(TESTFLAGS)" bash scripts/test-docker.sh

test-nocgo: ## lockscan and advisory built without cgo (the WebAssembly parser): the same results as with cgo
	CGO_ENABLED=0 $(GO) test $(GOFLAGS) $(TESTFLAGS) -count=1 -timeout 40m ./lockscan/... ./advisory/...

test-unit: ## unit tests of every module only, no servers
	@$(call each,$(GO) test $(GOFLAGS) -short -race -count=1 -shuffle=on ./...)

lint: ## gofmt; per module go vet; pgadvisoryvet over every module; the vettool golden test (each module alone: make release-check)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(call each,$(GO) vet ./...)
	$(GO) run ./lint/cmd/pgadvisoryvet -test=false $(patsubst %,%/...,$(MODULES))
	sh lint/vetgolden.sh

budget: ## what adopting the library costs a program: modules, binary sizes with both parsers, builds without cgo
	bash scripts/budget.sh

release-check: ## publish the committed tree as v0.1.0 to a file:// proxy; every module builds and is tidy alone; go install / go get / go get -tool / the golangci plugin from it
	bash scripts/release-check.sh

# The lock benchmark's run: 2 rounds; each interleaved cell gets 6 s a round
# (24 passes of 250 ms turns for the goals' wide pairs).
BENCH_FLAGS ?= -rounds 2 -paired-duration 6s -cpuprofile out/bench-cpu.pprof
bench: lab ## the lock benchmark: naive pattern, WithXactLock over pgx, pgadvisory and a guarded pgxpool, the seed pattern guarded, a held session lock, Redlock (out/bench.md, out/bench.svg)
	$(LAB) bench $(BENCH_FLAGS) -out out/bench.md -svg out/bench.svg

bench-docs: lab ## make bench, writing its report to docs/bench.md and docs/bench.svg and its summary into the README's benchmark section
	$(LAB) bench $(BENCH_FLAGS) -out docs/bench.md -svg docs/bench.svg -readme README.md

# The ceiling goals decided with more samples: only (c), (e) and (g), each
# interleaved pair in 16 blocks a round instead of 4 (32 in all), which
# halves the width of the intervals make bench leaves undecided.
GOALS_FLAGS ?= -variants c,e,g -rounds 2 -paired-blocks 16 -paired-duration 16s -warmup 500ms -overhead=false
bench-goals: lab ## the ceiling goals' cells (c), (e), (g) only, interleaved in 4x the blocks of make bench (docs/bench-goals.md; about 25 min)
	$(LAB) bench $(GOALS_FLAGS) -out docs/bench-goals.md

instructions: lab ## the client's instructions per lock cycle, cell by cell, counted by valgrind's cachegrind (out/instructions.md; needs valgrind)
	$(LAB) instructions | tee out/instructions.md

syscalls: lab ## the client's system calls and context switches per lock cycle, cell by cell, counted by perf (out/syscalls.md; needs linux-perf)
	$(LAB) syscalls | tee out/syscalls.md

bench-go: ## Go benchmarks of the driver against pgx stdlib (then: benchstat -col /driver out/bench-go.txt)
	@mkdir -p out
	$(GO) test -run '^$$' -bench 'Loopback|Intercept|LockCycle' -benchmem -count 10 . | tee out/bench-go.txt

faults: ## run the fault-injection tests and print their results as the README's table
	@rm -f out/faults.jsonl; mkdir -p out
	PGADVISORY_FAULT_REPORT=$(CURDIR)/out/faults.jsonl $(GO) test -count=1 -run 'TestFault' ./lab/internal/settle/
	@$(GO) run ./lab/internal/settle/faulttable out/faults.jsonl

PGXSUITE_FLAGS ?= -out out/pgx-suites
pgx-suites: ## pgx's own stdlib, pgxpool, root-package and pgconn tests, plain and through pgadvisory (direct and PgBouncer session); fails on a regression
	$(GO) run ./lab/internal/pgxsuite $(PGXSUITE_FLAGS)

toolcheck: ## golang-migrate, goose and tern from three processes through PgBouncer under policy hold (module toolcheck/, also run by make test)
	cd toolcheck && $(GO) test $(GOFLAGS) $(TESTFLAGS) -timeout 20m -count=1 ./...

examples: ## build the example programs (examples/) and run each against PgBouncer transaction pooling (also run by make test)
	cd examples && $(GO) test $(GOFLAGS) $(TESTFLAGS) -count=1 -timeout 10m ./...

river: ## River v0.51 (riverpgxv5 and riverdatabasesql) migrates and works jobs through PgBouncer transaction pooling, default policy and hold (module toolcheck/; CI runs it with make test)
	cd toolcheck && $(GO) test $(GOFLAGS) $(TESTFLAGS) -timeout 10m -count=1 -run 'TestRiver' .
