//go:build !cgo

package lockscan

import "testing"

// benchCgoStrategies: the protobuf and summary strategies need pg_query_go's
// cgo API.
func benchCgoStrategies(b *testing.B) {}
