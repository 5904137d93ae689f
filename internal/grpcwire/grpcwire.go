// Package grpcwire holds the HTTP/2 flow-control windows that the
// automator's gRPC server and every client of it (proxies, the Go client,
// the REST gateway) use: fixed windows instead of grpc-go's dynamic ones.
//
// With dynamic windows, an endpoint estimates the link's bandwidth-delay
// product by sending a PING whenever data arrives after the previous
// estimate was answered, until the window reaches its 16 MiB cap. Our
// messages are small, so the cap is never reached and almost every message
// costs a PING and its answer: two more writes and two more wake-ups on
// each side. On the bench's one-caller loop that was a third of the
// automator's CPU per unit (docs/performance.md).
//
// Fixed windows of 1 MiB per stream keep large messages (up to 8 MiB) fast
// over distance: a 50 ms round trip still carries about 20 MB/s per
// stream. They bound what one connection may have in flight unread (2 MiB)
// below what the dynamic windows allowed (up to 16 MiB).
//
// It holds the rest that both ends of a call agree on too: the keys of
// Complete's trailer and the bearer credential a client sends.
package grpcwire

import "google.golang.org/grpc"

const (
	// StreamWindow is the flow-control window of each stream.
	StreamWindow = 1 << 20
	// ConnWindow is the flow-control window of each connection, shared by
	// its streams.
	ConnWindow = 2 << 20
)

// ServerOptions are the flow-control options of a gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}

// DialOptions are the flow-control options of a gRPC client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}
