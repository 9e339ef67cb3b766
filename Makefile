# flagedge — build, run and test. `make run` brings the local system up; `make test` runs
# every test against throwaway PostgreSQL clusters.
GO       ?= go
GOFLAGS  ?=
PKGS     := ./...

.PHONY: all build run test bench generate generate-check jsbundle jsbundle-check lint deps deploy-check clean

all: build

deps:
	@bash deploy/install-deps.sh

# The version and commit --version prints and flagedge_build_info exports.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X github.com/flagedge/flagedge/internal/version.Version=$(VERSION) -X github.com/flagedge/flagedge/internal/version.Commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/controlplane ./controlplane/cmd/controlplane
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/edge ./edge/cmd/edge

run: deps build
	@bash deploy/run-local.sh

test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# The standard benchmark suite against a local stack (throwaway PostgreSQL, control plane, one
# edge), with the Go micro-benchmarks, then the pinned scenario (self-contained: the edge and
# a bare responder alone on CPU 1, wrk on CPU 0) once that stack is down; the reports go to
# one directory of bench/results/.
ifndef BENCH_OUT
BENCH_OUT := bench/results/$(shell date -u +%Y%m%d-%H%M%S)
endif
bench: deps build
	@bash deploy/run-local.sh $(GO) run ./bench --suite --go-bench --duration 4s --out $(BENCH_OUT)
	$(GO) run ./bench --scenario pinned --duration 4s --out $(BENCH_OUT)

# Regenerates shared/syncpb from sync.proto (needs protoc, protoc-gen-go and protoc-gen-go-grpc;
# see "Development" in README.md).
generate:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) generate ./shared/syncpb

# Fails when the checked-in generated code differs from what generate writes; skipped where
# protoc is not installed.
generate-check:
	@if command -v protoc >/dev/null && [ -x "$$($(GO) env GOPATH)/bin/protoc-gen-go" ]; then \
		$(MAKE) generate && git diff --exit-code -- shared/syncpb; \
	else echo "generate-check: protoc not installed; skipped"; fi

# Rewrites edge/jsbundle/dist from the posthog-js tarball pinned in edge/jsbundle/PIN (npm pack,
# integrity checked); commit the result.
jsbundle:
	$(GO) generate ./edge/jsbundle

# Fails when the committed edge/jsbundle/dist differs from the pinned tarball (needs the npm
# registry).
jsbundle-check:
	$(GO) run ./edge/jsbundle/fetch -dir edge/jsbundle -check

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff

# Validates deploy/ (Dockerfile, compose, Kubernetes, systemd) without a daemon or cluster;
# installs docker-compose and buildah with apt-get where missing. Not part of `make test`.
# FLAGEDGE_SKIP_IMAGE=1 skips the image build.
deploy-check:
	@bash deploy/check.sh

clean:
	rm -rf bin
