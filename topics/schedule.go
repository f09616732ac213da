package topics

import (
	"crypto/sha256"
	"encoding/hex"
)

// The keys of a stage's scheduled tasks (tasks read before their NotBefore, or kept aside for
// a retry delay) all carry the {stage} hash tag, so that one script touches them together on
// Redis Cluster. A request key (a flight key) holds no braces, so ScheduledIndex keeps the tag.

// Scheduled is the sorted set of stage's scheduled tasks: each member a scheduled id
// (ScheduledID), its payload in ScheduledTasks, scored by the Unix millisecond at which the
// task is due. A consumer moves due members back onto the stage's task stream.
func (k Keyspace) Scheduled(stage string) string { return k.scheduled(stage) + ":due" }

// ScheduledMoving holds the ids a consumer took from Scheduled and is appending to the task
// stream, scored by when it took them; ids left there by a consumer that died in between are
// put back after a while.
func (k Keyspace) ScheduledMoving(stage string) string { return k.scheduled(stage) + ":appending" }

// ScheduledTasks is the hash of stage's scheduled payloads: scheduled id -> "<request key>
// <payload>", for every id in Scheduled or ScheduledMoving.
func (k Keyspace) ScheduledTasks(stage string) string { return k.scheduled(stage) + ":tasks" }

// ScheduledIndex is the hash of requestKey's scheduled tasks in stage: scheduled id -> task
// id, so that inspecting or cancelling a key reads only its own members.
func (k Keyspace) ScheduledIndex(stage, requestKey string) string {
	return k.scheduled(stage) + ":key:" + requestKey
}

// ScheduledLegacy is the sorted set in which versions without the index kept stage's
// scheduled tasks: the payload itself as member, scored by its due time. Consumers still
// append its members when due and never add to it; ScheduledLegacyMoving is its moving set.
func (k Keyspace) ScheduledLegacy(stage string) string { return k.scheduled(stage) }

// ScheduledLegacyMoving holds the members of ScheduledLegacy being appended to the task stream.
func (k Keyspace) ScheduledLegacyMoving(stage string) string { return k.scheduled(stage) + ":moving" }

func (k Keyspace) scheduled(stage string) string { return k.p() + ":scheduled:" + tag(stage) }

// ScheduledID is the member of a scheduled payload in Scheduled: "#" and the hex SHA-256 of
// the payload, so that the same task scheduled twice is one member, and no id can be taken for
// a payload.
func ScheduledID(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "#" + hex.EncodeToString(sum[:])
}

// IsScheduledID reports whether a member taken from a scheduled set is a scheduled id (of
// Scheduled) rather than a payload (of ScheduledLegacy).
func IsScheduledID(member string) bool { return len(member) > 0 && member[0] == '#' }
