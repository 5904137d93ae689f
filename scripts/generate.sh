#!/usr/bin/env bash
# Regenerates the protobuf Go code under proto/ with pinned generators built
# from source by the go command (no downloaded binaries): scripts/protogen
# compiles the proto (with protocompile, buf's compiler) and runs the
# plugins. The output is committed; `make generate-check` verifies it is
# reproduced byte for byte. An argument names another directory to write
# into instead of proto/ (used by generate-check).
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GRPC_GATEWAY_VERSION=v2.33.0 # protoc-gen-grpc-gateway and protoc-gen-openapiv2

tools="$PWD/.tools"
mkdir -p "$tools"
# Each plugin is built once per version; the stamp file records which.
install() { # name version module-path
	local stamp="$tools/.$1-$2"
	if [ ! -x "$tools/$1" ] || [ ! -f "$stamp" ]; then
		GOBIN="$tools" go install "$3@$2"
		rm -f "$tools/.$1-v"* # not "$1-"*: protoc-gen-go would match protoc-gen-go-grpc
		touch "$stamp"
	fi
}
install protoc-gen-go "$PROTOC_GEN_GO_VERSION" google.golang.org/protobuf/cmd/protoc-gen-go
install protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" google.golang.org/grpc/cmd/protoc-gen-go-grpc
install protoc-gen-grpc-gateway "$GRPC_GATEWAY_VERSION" github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
install protoc-gen-openapiv2 "$GRPC_GATEWAY_VERSION" github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2
# The driver is its own module (scripts/protogen/go.mod); the build cache
# makes this quick once built.
(cd scripts/protogen && go build -o "$tools/protogen" .)

PATH="$tools:$PATH" "$tools/protogen" -out "${1:-proto}"
