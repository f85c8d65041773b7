# swetui's build and test entry points. `make test` is the test command CI runs.
GO ?= go
PKGS := ./...

.PHONY: build build-blas test check setup bench

# The default build is pure Go; build-blas links OpenBLAS (Debian's
# libopenblas-dev, cgo) for about 4x faster training on CPU.
build:
	$(GO) build -o swetui .

build-blas:
	CGO_ENABLED=1 $(GO) build -tags blas -o swetui .

setup:
	bash .ci/setup

# Static checks, every test (integration tests use the Docker Engine and the
# images `make setup` builds), then the model again on the OpenBLAS build.
test: check
	$(GO) test -count=1 -timeout 25m $(PKGS)
	CGO_ENABLED=1 $(GO) test -count=1 -tags blas ./model/...

check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	CGO_ENABLED=1 $(GO) vet -tags blas ./model/...

bench:
	$(GO) test ./model -run '^$$' -bench . -benchtime 5x
	CGO_ENABLED=1 $(GO) test -tags blas ./model -run '^$$' -bench . -benchtime 5x
