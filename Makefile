# The README's two commands are `make up` and `make test`.
GO ?= go
# PYTHON runs the Python publisher's tests (python/): the first python3 that
# imports zmq, msgpack and pytest (Debian: python3-zmq python3-msgpack python3-pytest).
PYTHON ?= $(firstword $(foreach p,/usr/bin/python3 python3,$(shell $(p) -c 'import zmq, msgpack, pytest' >/dev/null 2>&1 && echo $(p))))

.PHONY: test up build bench fuzz

# RAPID_PKGS are the packages whose tests use rapid (property tests); the
# others are OTHER_PKGS. RAPID_SEED fixes rapid's draws in `make test`, so the
# gate is deterministic: the same commit draws the same cases on every run.
# `make rapid` explores with fresh random seeds instead (like `make fuzz`).
RAPID_PKGS = $(shell $(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/pgregory.net\/rapid/{print $$1}')
OTHER_PKGS = $(filter-out $(RAPID_PKGS),$(shell $(GO) list ./...))
RAPID_SEED ?= 1
RAPID_CHECKS ?= 1000

# test: vet, staticcheck (pinned in go.mod's tool block; with the chaos tag,
# which only adds files, so the fault suite is checked too), then every test
# under the race detector (rapid's draws fixed by RAPID_SEED), then the Python
# publisher's tests (they build and run kvrouter serve). This is what CI runs.
test:
	$(GO) vet ./...
	$(GO) tool staticcheck -tags chaos ./...
	$(GO) test -race -count=1 -timeout 20m $(OTHER_PKGS)
	$(GO) test -race -count=1 -timeout 20m $(RAPID_PKGS) -rapid.seed=$(RAPID_SEED)
	@test -n "$(PYTHON)" || { echo "make test: no python3 with zmq, msgpack and pytest; apt-get install python3-zmq python3-msgpack python3-pytest (or set PYTHON=...)" >&2; exit 1; }
	GO=$(GO) $(PYTHON) -m pytest -q -p no:cacheprovider python/tests scripts/tests

# up: build and start a local fleet on embedded defaults.
up: build
	./bin/kvrouter up

# build: bin/kvrouter, stamped with the commit it is built from (kvrouter --version).
build:
	@echo "building bin/kvrouter (the first build compiles every dependency and takes a few minutes; later ones are cached)"
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kvrouter ./cmd/kvrouter

# bench: the micro-benchmarks of every hot path (see docs/benchmarks.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: fuzz-long browser-test rapid

# rapid: every rapid property test with fresh random seeds and RAPID_CHECKS
# cases each (default 1000). Not part of CI (the gate is deterministic): run it
# by hand with make fuzz; a failure prints the seed that reproduces it
# (-rapid.seed=...) and leaves a fail file under the package's testdata/rapid/.
rapid:
	$(GO) test -count=1 -timeout 30m $(RAPID_PKGS) -rapid.checks=$(RAPID_CHECKS)

# fuzz: every Fuzz target for FUZZTIME seconds each (default 3). Not part of CI
# (the gate is deterministic): run it before each submission.
# Crashers land in the package's testdata/fuzz/ and fail the run: commit them.
fuzz:
	GO=$(GO) scripts/fuzz.sh $${FUZZTIME:-3}

# fuzz-long: the same for 60 s per target (about half an hour), before a release.
fuzz-long:
	GO=$(GO) scripts/fuzz.sh 60

# browser-test: the status page in headless Debian chromium against `kvrouter up`
# (installs chromium with apt-get if missing; needs node). The screenshot goes to
# /tmp/kvrouter-status-page.png; UPDATE_DOCS_IMG=1 also rewrites docs/img/status-page.png.
browser-test: build
	scripts/browser-test.sh bin/kvrouter

.PHONY: chaos soak

# chaos: the fault suite (internal/chaos, build tag chaos): CHAOS_SCHEDULES
# fault schedules (default 12) drawn from fresh seeds (-chaos.fresh) against an
# in-process fleet; make test runs the short suites on fixed seeds instead.
# A failure prints its seed; replay with
#   go test -tags chaos -race -run '^TestChaosLong$$' ./internal/chaos/ -chaos.seed=N
chaos:
	$(GO) test -tags chaos -race -count=1 -timeout 60m -run '^TestChaos' -v ./internal/chaos/ -chaos.fresh -chaos.schedules=$${CHAOS_SCHEDULES:-12} 2>&1 | grep -v '^        time='

# soak: 1,000 concurrent streaming clients for SOAK_SECONDS (default 60)
# through one router to 8 mock workers on loopback; reports errors, p99
# overhead and the router's RSS and goroutines sampled across the run.
soak: build
	$(GO) test -tags chaos -count=1 -timeout 30m -run '^TestSoak$$' -v ./internal/chaos/ -soak.bin=$(CURDIR)/bin/kvrouter -soak.seconds=$${SOAK_SECONDS:-60} 2>&1 | grep -v '^        time='
