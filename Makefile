# swetui's build and test entry points. `make test` is the test command CI runs.
GO ?= go
PKGS := ./...

.PHONY: build test check setup

build:
	$(GO) build -o swetui .

setup:
	bash .ci/setup

# Static checks, then every test. Integration tests need the Docker Engine and
# the images `make setup` builds.
test: check
	$(GO) test -count=1 -timeout 25m $(PKGS)

check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
