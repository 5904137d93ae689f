// Package examples holds the runnable examples of docs/api.md, one per
// language: curl.sh (curl), execute.py (Python, standard library only) and
// goclient (Go, with automator/client). The tests here run each of them
// against a real automator and proxy, and check that docs/api.md shows
// them verbatim.
package examples
