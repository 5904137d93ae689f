// Package pid1 lets a program that a container runs as its first process
// (PID 1 of its PID namespace, with no init before it: docker run without
// --init, a Kubernetes pod) do what PID 1 must. Every process orphaned in
// the namespace becomes PID 1's child, and only its wait ends it: a
// proxy's scripts leave such processes (a background job at a normal
// exit, the children of a script killed at its deadline), and a PID 1
// that waits only for its own children would keep each as a zombie until
// the namespace ran out of pids. The kernel also gives PID 1 no default
// action for a signal: one it does not handle is dropped, SIGTERM
// included.
package pid1
