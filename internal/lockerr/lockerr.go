// Package lockerr holds the error values that the driver (package
// pgadvisory) and the lock helpers (package advisory) both export, so that
// each package's name for them is the same value: neither package imports
// the other.
package lockerr

import "errors"

// Lost means a lock its holder believed held may no longer be: the
// connection or holder that kept it failed, a lease ended, or an unlock
// found it gone. Exported as pgadvisory.ErrLockLost and advisory.ErrLockLost.
var Lost = errors.New("pgadvisory: advisory lock lost")
