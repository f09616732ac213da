package topics

import (
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

// DefaultPrefix is the namespace of every Flightdeck key unless a Keyspace says otherwise.
const DefaultPrefix = "ai"

// ConsumerGroup is the consumer group every Flightdeck consumer joins on the task streams.
const ConsumerGroup = "flightdeck"

// ParkingConsumer is the consumer name, in ConsumerGroup, that holds parked task entries:
// tasks that follow a running flight. An entry stays pending there until whoever writes its
// terminal event acknowledges it, so a parked task survives any crash, restart or TTL. The
// leading '~' keeps it apart from consumer process names, which may not start with it.
const ParkingConsumer = "~parked"

// ErrInvalidKeyspace: a Keyspace that cannot name keys (see Keyspace.Validate).
var ErrInvalidKeyspace = errors.New("topics: invalid keyspace")

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// Keyspace builds Redis key and stream names under one prefix. The zero value uses
// DefaultPrefix. Tests that share a Redis server give each test its own prefix.
// A Keyspace is a plain value and safe for concurrent use.
type Keyspace struct {
	// Prefix is the first segment of every name. Defaults to "ai".
	Prefix string
	// Partitions splits a stage's task stream into P streams ai:tasks:<stage>:<p>, so that on
	// Redis Cluster one busy stage spreads over several shards. Producers pick a partition by
	// task id; every consumer of the stage reads all of them. Stages not listed (or with
	// P <= 1) keep the one stream ai:tasks:<stage>. Producers and consumers must agree.
	// Must not be modified once in use.
	Partitions map[string]int
}

// Validate reports a keyspace that would break the key scheme: a prefix outside
// [A-Za-z0-9_.:-] (braces would split one flight over several Redis Cluster slots, whitespace
// would break the entry references kept in Redis) or longer than 64 bytes, and partition
// counts outside 1-64.
func (k Keyspace) Validate() error {
	if k.Prefix != "" && !prefixRe.MatchString(k.Prefix) {
		return fmt.Errorf("%w: prefix %q: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", ErrInvalidKeyspace, k.Prefix)
	}
	for stage, n := range k.Partitions {
		if n < 0 || n > 64 {
			return fmt.Errorf("%w: stage %q: %d partitions, want 1-64", ErrInvalidKeyspace, stage, n)
		}
	}
	return nil
}

func (k Keyspace) p() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

func tag(key string) string { return "{" + key + "}" }

// Flight is the string holding the record of the flight of requestKey: its state machine and,
// once it succeeded, its result. Events name it as resultRef.
func (k Keyspace) Flight(requestKey string) string { return k.p() + ":flight:" + tag(requestKey) }

// Fence is the last token of an ended run of requestKey's flight, kept when the flight had more
// than one token or the run was closed; it outlives the record.
func (k Keyspace) Fence(requestKey string) string { return k.p() + ":flight:fence:" + tag(requestKey) }

// Waiters is the set of task entries parked on the flight of requestKey.
func (k Keyspace) Waiters(requestKey string) string {
	return k.p() + ":flight:waiters:" + tag(requestKey)
}

// FlightKeys returns the three keys of one flight in the order every flight script takes them:
// record, waiters, fence. All three share the {requestKey} hash tag. They are cut from one
// string, made with one allocation.
func (k Keyspace) FlightKeys(requestKey string) []string {
	p := k.p()
	const flight, waiters, fence = ":flight:{", ":flight:waiters:{", ":flight:fence:{"
	var b strings.Builder
	b.Grow(3*(len(p)+len(requestKey)+1) + len(flight) + len(waiters) + len(fence))
	for _, part := range [...]string{flight, waiters, fence} {
		b.WriteString(p)
		b.WriteString(part)
		b.WriteString(requestKey)
		b.WriteByte('}')
	}
	s := b.String()
	n1 := len(p) + len(flight) + len(requestKey) + 1
	n2 := n1 + len(p) + len(waiters) + len(requestKey) + 1
	return []string{s[:n1], s[n1:n2], s[n2:]}
}

// Tasks is the task stream of an unpartitioned stage (the watermill topic); see TaskStreams.
func (k Keyspace) Tasks(stage string) string { return k.p() + ":tasks:" + stage }

func (k Keyspace) partitions(stage string) int {
	if n, ok := k.Partitions[stage]; ok {
		return n
	}
	return k.Partitions["*"]
}

// TaskStreams lists every task stream of stage: ai:tasks:<stage>, or ai:tasks:<stage>:<p>
// for each of its partitions.
func (k Keyspace) TaskStreams(stage string) []string {
	n := k.partitions(stage)
	if n <= 1 {
		return []string{k.Tasks(stage)}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = k.Tasks(stage) + ":" + strconv.Itoa(i)
	}
	return out
}

// TaskStreamFor is the task stream a task of stage with taskID goes to.
func (k Keyspace) TaskStreamFor(stage, taskID string) string {
	n := k.partitions(stage)
	if n <= 1 {
		return k.Tasks(stage)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(taskID))
	return k.Tasks(stage) + ":" + strconv.Itoa(int(h.Sum32()%uint32(n)))
}

// Results is the stream of terminal events of stage.
func (k Keyspace) Results(stage string) string { return k.p() + ":results:" + stage }

// DLQ is the dead-letter stream of stage's task stream.
func (k Keyspace) DLQ(stage string) string { return k.p() + ":tasks:" + stage + ":dlq" }

// SessionLock is the session lock key of tenant's session sessionID for heavy stages. The
// tenant is part of the key (and of its hash tag): two tenants' sessions never share a lock.
func (k Keyspace) SessionLock(tenant, sessionID string) string {
	return k.p() + ":session:lock:" + tag(tenant+":"+sessionID)
}

// SessionFence is the fencing counter of tenant's session lock of sessionID; it outlives the
// lock.
func (k Keyspace) SessionFence(tenant, sessionID string) string {
	return k.p() + ":session:fence:" + tag(tenant+":"+sessionID)
}

// Consumers is the liveness record of the consumers of group.
func (k Keyspace) Consumers(group string) string { return k.p() + ":consumers:" + group }

// Stages is the stage registry: a hash, one field per stage that a consumer process consumes
// or consumed, each holding a StageInfo JSON (partitions, mode, model, the last consumer that
// registered it and when). Consumers write it at start and on every liveness beat, and never
// remove a stage; producers read it to refuse a stage that no consumer reads (ReadStages).
func (k Keyspace) Stages() string { return k.p() + ":stages" }

// StageOf returns the stage of a task stream name, or "" when name is not a task stream of k.
func (k Keyspace) StageOf(taskStream string) string {
	s, ok := strings.CutPrefix(taskStream, k.p()+":tasks:")
	if !ok {
		return ""
	}
	if stage, part, found := strings.Cut(s, ":"); found {
		if _, err := strconv.Atoi(part); err != nil || strings.Contains(part, ":") {
			return ""
		}
		return stage
	}
	return s
}

// LimiterKeys returns the keys of the named limiter in the order limit_take and limit_settle
// take them: its state, its running calls, its active tenants. All three share the {name}
// hash tag.
func (k Keyspace) LimiterKeys(name string) []string {
	b := k.p() + ":limit:" + tag(name)
	return []string{b, b + ":running", b + ":tenants"}
}
