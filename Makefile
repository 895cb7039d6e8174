# Lethe's build. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
TOOL := $(GO) tool -modfile=tools/go.mod
PLUGINS := $(notdir $(wildcard plugins/*))
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/lethehq/lethe/internal/cli.Version=$(VERSION)
# Benchmarks: BENCH selects, BENCHTIME sets the length of each.
BENCH ?= .
BENCHTIME ?= 1x
BENCHPKGS ?= ./...

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/lethe and every example plugin into bin/plugins/
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/lethe ./cmd/lethe
	@mkdir -p bin/plugins
	@for p in $(PLUGINS); do echo "$(GO) build -o bin/plugins/$$p ./plugins/$$p"; $(GO) build -o bin/plugins/$$p ./plugins/$$p || exit 1; done

# Installation: PREFIX (default /usr/local) and DESTDIR (for packagers).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(PREFIX)/bin
PLUGINDIR := $(PREFIX)/lib/lethe/plugins
UNITDIR := $(PREFIX)/lib/systemd/system
DOCDIR := $(PREFIX)/share/doc/lethe

.PHONY: install
install: build ## install lethe, the example plugins, the systemd unit and the example config under PREFIX
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)
	install -m 0755 bin/lethe $(DESTDIR)$(BINDIR)/lethe
	install -m 0755 bin/plugins/* $(DESTDIR)$(PLUGINDIR)/
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/systemd/lethe.service > $(DESTDIR)$(UNITDIR)/lethe.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/lethe.service
	install -m 0644 docs/config.example.yaml docs/operations.md $(DESTDIR)$(DOCDIR)/
	@echo "installed $(DESTDIR)$(BINDIR)/lethe (version $(VERSION)); example plugins in $(DESTDIR)$(PLUGINDIR)"

.PHONY: uninstall
uninstall: ## remove what make install installed under PREFIX
	rm -f $(DESTDIR)$(BINDIR)/lethe $(DESTDIR)$(UNITDIR)/lethe.service
	rm -rf $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(DOCDIR)
	-rmdir $(DESTDIR)$(PREFIX)/lib/lethe

.PHONY: demo
demo: build ## run Lethe's main job end to end on the embedded defaults
	bash internal/demo/demo.sh

.PHONY: test
# The browser tests are a module of their own (internal/e2e/browser), so
# that chromedp stays out of the main go.mod; they skip without Chromium
# unless CI=true or LETHE_BROWSER_REQUIRE=1.
test: ## run every test (-race), the docs' commands and the browser's included; PostgreSQL tests need LETHE_TEST_POSTGRES_URL, browser tests Chromium
	$(GO) test -race -count=1 -timeout 20m ./...
	cd internal/e2e/browser && $(GO) test -count=1 -timeout 10m ./...

.PHONY: faults
faults: ## the fault suite at full length (docs/faults.md); needs LETHE_TEST_POSTGRES_URL and versitygw; `make test` runs a short version
	LETHE_FAULTS=full $(GO) test -count=1 -v -timeout 90m -run '^(TestFault|TestTCPProxy|TestChecker)' ./internal/faults ./internal/e2e

.PHONY: mutants
mutants: ## check that each invariant's test catches its mutation (mutants/*.patch)
	bash mutants/run.sh

# The mutation sweep: SWEEP_PKGS selects packages (default: every engine the
# report covers); SWEEP_TIMEOUT_COEFFICIENT bounds each mutant's test run.
SWEEP_PKGS ?=
.PHONY: mutation-sweep
mutation-sweep: ## mutation-test the engines with gremlins (slow; not in CI) and write docs/mutation-sweep.md
	bash mutants/sweep.sh $(SWEEP_PKGS)

.PHONY: bench
bench: ## run the benchmarks (BENCH=regexp BENCHTIME=3x BENCHPKGS=./internal/...)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem -timeout 60m $(BENCHPKGS)

.PHONY: generate
generate: ## regenerate the protobuf code with buf
	$(TOOL) buf generate

.PHONY: verify
# `go mod tidy -diff` prints what tidy would change and fails without writing;
# `go mod verify` checks the module cache against go.sum.
verify: generate ## regenerate code and fail on any diff; check go.mod is tidy; verify modules
	$(TOOL) buf lint
	@git diff --exit-code -- proto || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- proto)" || { echo "untracked generated files: run 'make generate' and commit"; git status --porcelain -- proto; exit 1; }
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run 'go mod tidy' and commit"; exit 1; }
	@cd tools && $(GO) mod tidy -diff || { echo "tools/go.mod is not tidy: run 'cd tools && go mod tidy' and commit"; exit 1; }
	@cd tools/gremlins && $(GO) mod tidy -diff || { echo "tools/gremlins/go.mod is not tidy: run 'cd tools/gremlins && go mod tidy' and commit"; exit 1; }
	@cd internal/e2e/browser && $(GO) mod tidy -diff || { echo "internal/e2e/browser/go.mod is not tidy: run 'cd internal/e2e/browser && go mod tidy' and commit"; exit 1; }
	$(GO) mod verify
	cd internal/e2e/browser && $(GO) mod verify

.PHONY: lint
# golangci-lint (pinned in tools/go.mod, configured in .golangci.yml) runs
# go vet among its linters.
lint: ## gofmt, golangci-lint and buf lint
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(TOOL) golangci-lint run ./...
	cd internal/e2e/browser && $(GO) vet ./...
	$(TOOL) buf lint

.PHONY: clean
clean: ## remove build outputs and the demo's home
	rm -rf bin .demo
