// The generator's own module, so that the compiler it is built with is no
// dependency of the automator or the proxy.
module github.com/opsgate/opsgate/scripts/protogen

go 1.26.7

require (
	github.com/bufbuild/protocompile v0.14.2-0.20261020145055-56248e843b50
	google.golang.org/protobuf v1.36.13-0.20261016172727-e9ee2a76ab8e
)

require (
	github.com/petermattis/goid v0.0.0-20260716134002-a9b348f0a2b9 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
