#!/usr/bin/env bash
# Regenerates the protobuf Go code under proto/ with pinned generators built
# from source by the go command (no downloaded binaries). The output is
# committed; `make generate-check` verifies it is reproduced byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GRPC_GATEWAY_VERSION=v2.33.0 # protoc-gen-grpc-gateway and protoc-gen-openapiv2

tools="$PWD/.tools"
mkdir -p "$tools"
# Each tool is built once per version; the stamp file records which.
install() { # name module@version
	local stamp="$tools/.$1-$2"
	if [ ! -x "$tools/$1" ] || [ ! -f "$stamp" ]; then
		GOBIN="$tools" go install "$3@$2"
		rm -f "$tools/.$1-v"* # not "$1-"*: protoc-gen-go would match protoc-gen-go-grpc
		touch "$stamp"
	fi
}
install buf "$BUF_VERSION" github.com/bufbuild/buf/cmd/buf
install protoc-gen-go "$PROTOC_GEN_GO_VERSION" google.golang.org/protobuf/cmd/protoc-gen-go
install protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" google.golang.org/grpc/cmd/protoc-gen-go-grpc
install protoc-gen-grpc-gateway "$GRPC_GATEWAY_VERSION" github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
install protoc-gen-openapiv2 "$GRPC_GATEWAY_VERSION" github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2

out="${1:-proto}"
if [ "$out" = proto ]; then
	PATH="$tools:$PATH" "$tools/buf" generate
else
	# Generate into another directory (used by generate-check).
	tmpl=$(mktemp --suffix=.gen.yaml)
	trap 'rm -f "$tmpl"' EXIT
	sed "s#out: proto#out: $out#" buf.gen.yaml >"$tmpl"
	PATH="$tools:$PATH" "$tools/buf" generate --template "$tmpl"
fi
