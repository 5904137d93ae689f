# The two commands of the README: `make demo` runs the system end to end,
# `make test` runs the whole test suite (what CI runs).
SHELL := bash
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/opsgate/opsgate/version.Version=$(VERSION)
GO ?= go

.PHONY: all build test demo generate generate-check fmt-check vet staticcheck windows race fuzz bench chaos soak browser-deps test-browser

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./automator/cmd/automator ./proxy/cmd/proxy

generate:
	scripts/generate.sh

# Regenerates into a temporary directory and compares byte for byte.
generate-check:
	scripts/generate-check.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	scripts/staticcheck.sh

# The Windows build and vet, so Windows code never rots. Vet type-checks
# every test file too, so a test that would not compile for Windows fails
# here. Linking every test binary for Windows as well (go test -exec=true)
# would add only the links: about 90 s of CPU in every run, warm or cold.
windows:
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...

# All tests under the race detector (with them the short chaos runs of
# test/chaos, a fixed seed, about a minute each: on SQLite, and on PostgreSQL
# replicas, CHAOS_STORE=pg, on a cluster of its own). The PostgreSQL tests use the server
# AUTOMATOR_TEST_POSTGRES names, else a throwaway cluster scripts/pg-run.sh
# starts (and removes) with the machine's PostgreSQL; they fail, not skip,
# when neither is there.
#
# go test starts packages in the order they are named, -p at once. ./...
# alone names the longest (the process tests under test/) last, so the
# longest are named first: a scheduling hint only, since ./... still names
# every package once. automator/client spends nine tenths of its time
# waiting (on keepalives, deadlines and hung peers), so it starts early,
# beside the ones that compute. Four at once, not one per core: the tests
# wait on fsyncs, timers and child processes more than they compute (three
# at once kept 1.4 of the 2 cores busy and took 7m40 here, twice; four took
# 6m13 to 7m50 over four runs, 7m08 at the median: these machines are
# noisy, and automator/cli, first, slows most beside the other three).
# Six tests at once inside every package
# (-parallel 6) was no better: the packages that compute slowed as much as
# the waiting ones sped up. So only packages that mostly wait raise it, in
# their TestMain (internal/testparallel): automator/client and test/service.
# automator/cli with four went from 258-290 s to 209-229 s, but the first
# clean-clone run with it failed a timing-bound test of automator/client
# beside it (a 2 MiB answer over a thin link whose test proxy missed two
# deadlines), so it keeps the default.
SLOW_FIRST := ./automator/cli ./test/chaos ./automator/client ./test/e2e ./automator/server \
	./automator/store/pgstore ./test/replicas ./test/service ./proxy/agent \
	./automator/store/sqlitestore ./test/browser ./docs/examples
#
# The process tests (test/e2e, test/service, test/replicas, test/browser,
# test/chaos) run the real automator and proxy binaries. They are built here
# once, into a temporary directory removed afterwards, and handed to every
# package in OPSGATE_TEST_BIN (internal/proctest), instead of each package
# building its own (20-33 s of wall each under load, and on an empty build
# cache the whole tree compiled again beside the test binaries). Without
# -race, as the packages build them; also with -race, under race/, only when
# E2E_RACE or CHAOS_RACE asks for race-built ones. A package run alone, with
# OPSGATE_TEST_BIN unset, builds its own.
TEST_CMDS := ./automator/cmd/automator ./proxy/cmd/proxy
#
# RACE is -race for our code, not for SQLite's C translated to Go
# (modernc.org/sqlite/lib, and the libc, allocator and arithmetic it runs
# on), which with cgo would be C the detector does not see either.
# Instrumented, it took six times the CPU (the sqlitestore tests: 54 s of
# CPU against 9 s, 35 s of wall against 12 s), and the packages that use
# SQLite most were the longest of the step. Our packages, database/sql,
# sync and the driver (modernc.org/sqlite) keep the detector, so a race of
# ours on what we hand SQLite is still seen where our code touches it. (With
# the driver left out too, the detector reported crypto/tls's certificate
# cache in client tests, which it does not with the driver in: uninstrumented
# code can only hide a synchronisation from it, never add one.)
RACE := -race $(foreach p,modernc.org/sqlite/lib modernc.org/libc/... modernc.org/memory modernc.org/mathutil,-gcflags=$(p)=-race=false)
TEST_RACE_BINS = $(if $(E2E_RACE)$(CHAOS_RACE),$(GO) build $(RACE) -o "$$bin/race/" $(TEST_CMDS) &&)
race: browser-deps
	bin=$$(mktemp -d -t opsgate-test-bin-XXXXXX) && trap 'rm -rf "$$bin"' EXIT && \
	$(GO) build -o "$$bin/" $(TEST_CMDS) && $(TEST_RACE_BINS) \
	OPSGATE_TEST_BIN="$$bin" CHAOS_STORE=pg AUTOMATOR_REQUIRE_BROWSER=1 scripts/pg-run.sh $(GO) test $(RACE) -count=1 -p 4 -timeout 8m $(SLOW_FIRST) ./...

test: fmt-check vet staticcheck windows generate-check race

# Chromium for the browser test of the dashboard (test/browser, part of
# `race`): Debian's chromium package, installed when missing (as root).
browser-deps:
	@scripts/chromium.sh >/dev/null

# The browser test alone: headless Chromium through every page of the
# dashboard of a real automator with a real proxy; the screenshots land in
# bin/dashboard-screenshots (or $$AUTOMATOR_SCREENSHOTS).
test-browser: browser-deps
	AUTOMATOR_REQUIRE_BROWSER=1 $(GO) test -count=1 -v -run . ./test/browser

# Every fuzz target for FUZZTIME (default 30s) each.
fuzz:
	scripts/fuzz.sh

demo: build
	scripts/demo.sh

# Throughput, latency, wake-up and idle-scale figures of real processes on
# loopback, beside baselines measured in the same run (docs/performance.md):
# a markdown table on stdout and bench-results.json. PROFILE=1 also writes
# CPU, heap, block and goroutine profiles of the automator into
# bin/bench-profiles/.
bench: build
	$(GO) build -o bin/opsgate-bench ./scripts/bench
	bin/opsgate-bench -bin bin -out bench-results.json $(if $(filter-out 0,$(PROFILE)),-profile bin/bench-profiles) $(BENCHFLAGS)

# The long chaos run (docs/failure-semantics.md): a real automator and six
# real proxy instances under every kind of fault for 6 minutes and at least
# 20,000 units, from a random seed (CHAOS_SEED=N replays a run); the history
# is checked against the guarantees and a summary table printed.
# CHAOS_FLAGS adds flags of test/chaos (-chaos.duration, -chaos.units,
# -chaos.callers, -chaos.dir, -chaos.replicas). CHAOS_STORE=pg runs it on
# PostgreSQL instead (TestChaosPG): three replicas of the automator (or
# -chaos.replicas) on a throwaway cluster of the run's own, which the run
# crashes and stops, beside SIGKILLs, SIGSTOPs, connection resets and
# database partitions of one replica, and cuts of the callers' connections.
# The automator and proxy binaries are built first, as `race` builds them,
# into a temporary directory handed to the run in OPSGATE_TEST_BIN: only the
# race-built ones, under race/, when CHAOS_RACE asks for those, since the run
# uses no others.
CHAOS_STORE ?= sqlite
CHAOS_BINS = $(if $(CHAOS_RACE),$(GO) build $(RACE) -o "$$bin/race/" $(TEST_CMDS),$(GO) build -o "$$bin/" $(TEST_CMDS))
chaos:
	bin=$$(mktemp -d -t opsgate-chaos-bin-XXXXXX) && trap 'rm -rf "$$bin"' EXIT && \
	$(CHAOS_BINS) && \
	OPSGATE_TEST_BIN="$$bin" $(GO) test -count=1 -timeout 60m -run '^TestChaos$(if $(filter pg,$(CHAOS_STORE)),PG)$$' -v ./test/chaos -args -chaos.long -chaos.store=$(CHAOS_STORE) $(if $(CHAOS_SEED),-chaos.seed=$(CHAOS_SEED)) $(CHAOS_FLAGS)

# The soak, a leak check (docs/failure-semantics.md, "The soak"): a real
# automator on durable SQLite and four real proxy instances under a steady
# load of every kind of unit for SOAK_DURATION (default 20m), with a
# connection reset, a short black hole or a proxy restart every 8-16 s; the
# automator, two proxies and their reapers are sampled every 5 s (memory,
# open files, threads, goroutines, heap, the database's size), and the run
# fails when one grew from the second quarter of the run to the last past
# its allowance, or when the load saw a broken guarantee or a caller error.
# It prints a summary table, and keeps the samples (samples.csv), the report,
# the automator's goroutine and heap profiles and every log in SOAK_DIR
# (default bin/soak-DATE-TIME). SOAK_FLAGS adds flags of test/chaos
# (-soak.rate, -soak.callers, -soak.every, -soak.seed); SOAK_TIMEOUT bounds
# the whole run (default 90m: raise it with a SOAK_DURATION over an hour).
# The binaries are built first, as for `race`, into a temporary directory
# handed to the run in OPSGATE_TEST_BIN.
SOAK_DURATION ?= 20m
SOAK_TIMEOUT ?= 90m
soak:
	bin=$$(mktemp -d -t opsgate-soak-bin-XXXXXX) && trap 'rm -rf "$$bin"' EXIT && \
	$(GO) build -o "$$bin/" $(TEST_CMDS) && \
	dir="$(if $(SOAK_DIR),$(SOAK_DIR),bin/soak-$$(date +%Y%m%d-%H%M%S))" && mkdir -p "$$dir" && dir=$$(cd "$$dir" && pwd) && \
	echo "soak: samples, report, profiles and logs in $$dir" && \
	OPSGATE_TEST_BIN="$$bin" $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./test/chaos -args -soak.duration=$(SOAK_DURATION) -soak.dir="$$dir" $(SOAK_FLAGS)
