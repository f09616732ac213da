package postgres

import (
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

func row(key string, token int64, result string) flight.Archived {
	return flight.Archived{Key: key, Stage: "s", Tenant: "acme", Status: flight.StatusSucceeded, Token: token,
		Attempts: 1, Result: []byte(result), FinishedAt: time.Now()}
}
