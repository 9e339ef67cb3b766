# flagedge — build, run and test. `make run` brings the local system up; `make test` runs
# every test against throwaway PostgreSQL clusters.
GO       ?= go
GOFLAGS  ?=
PKGS     := ./...

.PHONY: all build run test test-short bench generate lint fmt deps clean

all: build

deps:
	@bash deploy/install-deps.sh

build:
	$(GO) build -o bin/controlplane ./controlplane/cmd/controlplane

run: deps build
	@bash deploy/run-local.sh

test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./shared/... ./controlplane/...

generate:
	$(GO) generate $(PKGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff

clean:
	rm -rf bin
