// Package archive keeps the terminal outcomes of flights in a durable Store behind Redis's
// short-lived flight state. Package archive/postgres is the PostgreSQL Store.
//
// Consumers write outcomes off the owner's critical path through a Writer. It batches
// them, spools them to disk with fsync while the store is away, and writes them back when
// it answers. Consumers read outcomes lazily: when Redis no longer knows a key, the
// archived outcome answers the key again without a model call. The consumer and
// executor.Executor do this lazy rehydrate. The package links no database driver.
package archive
