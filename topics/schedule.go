package topics

// Scheduled is the sorted set of stage's scheduled tasks: tasks read before their NotBefore
// (or kept aside for a retry delay), scored by the Unix millisecond at which they are due,
// each member the task's payload. A consumer moves due members back onto the stage's task
// stream. It carries the {stage} hash tag, with ScheduledMoving, so that one script moves
// members between the two on Redis Cluster.
func (k Keyspace) Scheduled(stage string) string { return k.p() + ":scheduled:" + tag(stage) }

// ScheduledMoving holds the members a consumer took from Scheduled and is appending to the
// task stream, scored by when it took them; members left there by a consumer that died in
// between are put back after a while.
func (k Keyspace) ScheduledMoving(stage string) string {
	return k.p() + ":scheduled:" + tag(stage) + ":moving"
}
