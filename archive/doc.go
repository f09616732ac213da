// Package archive keeps the terminal outcomes of flights in a durable store behind Redis's
// short-lived flight state (Store; package archive/postgres is the PostgreSQL one).
// Consumers write outcomes off the owner's critical path (Writer: batched, spooled to disk
// with fsync while the store is away, written back when it answers) and read them lazily:
// when Redis no longer knows a key, the archived outcome answers the key again without a
// model call (lazy rehydrate, in the consumer and executor.Executor). The package links no
// database driver.
package archive
