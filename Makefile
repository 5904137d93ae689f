# The two commands of the README: `make demo` runs the system end to end,
# `make test` runs the whole test suite (what CI runs).
SHELL := bash
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/opsgate/opsgate/version.Version=$(VERSION)
GO ?= go

.PHONY: all build test demo generate generate-check fmt-check vet staticcheck windows race fuzz

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

# The Windows build, vet and test compilation, so Windows code never rots.
windows:
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...
	@set -e; for p in $$(GOOS=windows $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		GOOS=windows $(GO) test -c -o /dev/null $$p; done

# All tests under the race detector.
race:
	$(GO) test -race -count=1 -timeout 8m ./...

test: fmt-check vet staticcheck windows generate-check race

# Every fuzz target for FUZZTIME (default 30s) each.
fuzz:
	scripts/fuzz.sh

demo: build
	scripts/demo.sh
