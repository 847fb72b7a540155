package advisory

// LocksSQL exposes the introspection query to the external tests.
const LocksSQL = locksSQL
