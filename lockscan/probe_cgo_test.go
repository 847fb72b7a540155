//go:build cgo

package lockscan

import (
	"os"
	"strconv"
)

// With LOCKSCAN_PROBE_STACK set, TestNestingProbe parses on a thread with
// that stack size (bytes), as a cgo call does on a musl thread:
//
//	LOCKSCAN_PROBE=function LOCKSCAN_PROBE_STACK=131072 go test -run TestNestingProbe ./lockscan
func init() {
	if v, err := strconv.Atoi(os.Getenv("LOCKSCAN_PROBE_STACK")); err == nil && os.Getenv("LOCKSCAN_PROBE") != "" {
		testStack = v
	}
}
