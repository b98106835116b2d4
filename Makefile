# kcand: build, run the demo, test.
#
#   make run    build everything and tune the demo requests through all plugins
#   make test   run every test
#   make proto  regenerate sdk/proto from kcand.proto (needs protoc, see README)

GO        ?= go
BIN       := bin
PLUGINS   := qmm gemv mxfp4 fp8tc
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
export CGO_ENABLED ?= 1

.PHONY: all build run test proto reliability clean

all: build

build:
	@mkdir -p $(BIN)/plugins
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kcand ./cmd/kcand
	@for p in $(PLUGINS); do \
		$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/plugins/$$p ./plugins/$$p || exit 1; \
	done
	@cd $(BIN)/plugins && sha256sum $(PLUGINS) > SHA256SUMS
	$(GO) build -o $(BIN)/faultplugin ./internal/faultplugin

run: build
	$(BIN)/kcand plugins
	$(BIN)/kcand tune --device auto

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

reliability: build
	$(BIN)/kcand faults --runs 5 --markdown docs/reliability.md

proto:
	cd sdk/proto && protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative kcand.proto

clean:
	rm -rf $(BIN)
