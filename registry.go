package pgadvisory

import (
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
)

// registry holds the configs of RegisterConnConfig by name.
var registry struct {
	sync.Mutex
	next    int
	configs map[string]*pgx.ConnConfig
}

// RegisterConnConfig registers a pgx config, as stdlib.RegisterConnConfig
// does, and returns the name to open it by: sql.Open("pgadvisory", name).
// The config is copied when the name is opened, and the guard installed on
// the copy (its pgadvisory_* RuntimeParams apply; an invalid one fails
// there). Names are not reused after UnregisterConnConfig.
func RegisterConnConfig(cfg *pgx.ConnConfig) string {
	registry.Lock()
	defer registry.Unlock()
	if registry.configs == nil {
		registry.configs = make(map[string]*pgx.ConnConfig)
	}
	name := "registeredConnConfig" + strconv.Itoa(registry.next)
	registry.next++
	registry.configs[name] = cfg
	return name
}

// UnregisterConnConfig removes the registration of name.
func UnregisterConnConfig(name string) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.configs, name)
}

// registeredConfig returns the config registered as name, or nil.
func registeredConfig(name string) *pgx.ConnConfig {
	registry.Lock()
	defer registry.Unlock()
	return registry.configs[name]
}
