package topics

import (
	"strconv"
	"time"
)

// StatsRetention is how long a per-minute stats hash, Keyspace.Stats, lives after its last
// write. That is a little over the hour the dashboard charts, so that a stage has at most
// about 70 such hashes at any time.
const StatsRetention = 70 * time.Minute

// Stats is the per-minute statistics hash of stage for the minute that starts at Unix second
// 60*minute. It holds what every consumer of the fleet answered in that minute, summed with
// HINCRBY. Its fields are StatsOutcomePrefix+<shared>_<status>, task counts by outcome and
// "parked", StatsBucketPrefix+<upper bound in seconds>, end-to-end latencies per histogram
// bucket, not cumulative, with "+Inf" for the last, and StatsCount and StatsSumMs. It expires
// StatsRetention after its last write.
func (k Keyspace) Stats(stage string, minute int64) string {
	return k.p() + ":stats:" + stage + ":" + strconv.FormatInt(minute, 10)
}

// Fields of the per-minute stats hash, Keyspace.Stats.
const (
	// StatsOutcomePrefix prefixes the outcome counters: "o:owner_SUCCEEDED", "o:parked".
	StatsOutcomePrefix = "o:"
	// StatsBucketPrefix prefixes the latency buckets: "le:0.25" counts the end-to-end
	// latencies above the previous bucket's bound and at most 0.25 s.
	StatsBucketPrefix = "le:"
	// StatsCount counts the latencies recorded.
	StatsCount = "n"
	// StatsSumMs sums the latencies recorded, in milliseconds.
	StatsSumMs = "sumMs"
)

// Paused is the hash of paused stages: one field per paused stage, holding who paused it and
// when as PauseInfo JSON. While a stage's field exists, its consumers read no new task entries
// and claim none of other consumers'. They still finish what they hold and answer parked
// tasks. Deleting the field resumes it.
func (k Keyspace) Paused() string { return k.p() + ":paused" }

// PauseInfo is the value of a stage's field in the Paused hash.
type PauseInfo struct {
	// By says who paused the stage, as free text. The dashboard writes its client address.
	By string `json:"by"`
	// At is when, in Unix milliseconds of the Redis clock.
	At int64 `json:"at"`
}
