# The README's two commands are `make up` and `make test`.
GO ?= go

.PHONY: test up build bench fuzz

# test: vet, then every test under the race detector. This is what CI runs.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

# up: build and start a local fleet on embedded defaults.
up: build
	./bin/kvrouter up

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kvrouter ./cmd/kvrouter

# bench: the micro-benchmarks of every hot path (see docs/benchmarks.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: fuzz-long browser-test

# fuzz: every Fuzz target for FUZZTIME seconds each (default 3; CI runs this).
# Crashers land in the package's testdata/fuzz/ and fail the run: commit them.
fuzz:
	GO=$(GO) scripts/fuzz.sh $${FUZZTIME:-3}

# fuzz-long: the same for 60 s per target (about half an hour), before a release.
fuzz-long:
	GO=$(GO) scripts/fuzz.sh 60

# browser-test: the status page in headless Debian chromium against `kvrouter up`
# (installs chromium with apt-get if missing); writes docs/img/status-page.png.
browser-test: build
	scripts/browser-test.sh bin/kvrouter
