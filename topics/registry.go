package topics

import (
	"time"
)

// StageInfo is one entry of the stage registry, Keyspace.Stages. It describes a stage that a
// consumer process consumes or consumed, as the last consumer that registered it described
// it. The hash field is the stage name. The value is the JSON of the other fields.
type StageInfo struct {
	// Name is the stage. It is the hash field, not part of the stored JSON.
	Name string `json:"-"`
	// Partitions is the stage's task stream count. 1 means the one stream ai:tasks:<stage>.
	Partitions int `json:"partitions"`
	// Mode is the stage's coordination mode: HYBRID, DISTRIBUTED_ONLY, LOCAL_ONLY or BYPASS.
	Mode string `json:"mode"`
	// Model is the stage's model adapter.
	Model string `json:"model"`
	// Consumer is the process name of the consumer that registered the stage last.
	Consumer string `json:"consumer"`
	// LastSeen is when that consumer last registered it: Unix milliseconds of the Redis clock.
	LastSeen int64 `json:"lastSeen"`
}

// LastSeenTime is LastSeen as a time, or the zero time when it is unset.
func (s StageInfo) LastSeenTime() time.Time {
	if s.LastSeen <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.LastSeen)
}
