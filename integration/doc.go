// Package integration holds leasequota's end-to-end tests on a real Redis,
// started by the harness in integration/redistest (see its doc for the
// ways it finds one). It has no non-test code besides this comment.
package integration
