package redislab_test

import (
	"context"
	"fmt"

	"github.com/pgadvisory/pgadvisory/lab/internal/redislab"
)

// Start five independent masters for a Redlock client and stop them again.
func Example() {
	lab, err := redislab.Start(context.Background(), 5)
	if err != nil {
		fmt.Println(err) // names the package to install when redis-server is missing
		return
	}
	defer lab.Close()
	for _, addr := range lab.Addrs() {
		fmt.Println("redis at", addr)
	}
}
