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
