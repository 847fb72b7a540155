package bench

import "github.com/pgadvisory/pgadvisory"

// PgadvisoryDriver is the database/sql driver name of this repository's
// driver (variant c). Importing the root package here registers it; it is
// the benchmark's only dependency on the driver.
const PgadvisoryDriver = pgadvisory.DriverName
