// Package queries holds SQL constants used from another package.
package queries

const Lock = "SELECT pg_advisory_lock($1)"

const prefix = "SELECT "

const TryLock = prefix + "pg_try_advisory_lock" + "($1)"
