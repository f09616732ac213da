// Package postgres is the archive's PostgreSQL store (archive.Store): one row per request key
// with its status, result or error, owner token and times, kept for a per-stage retention.
//
// Every row belongs to a deployment (Config.Deployment; a consumer's is its key prefix unless
// told otherwise), and a Store reads and writes only its own deployment's rows: deployments
// that share a database, such as two tenants' fleets or staging and production, never answer
// each other's keys.
//
// Writes are fenced in SQL: a row is replaced only by an outcome with a larger owner token,
// so a zombie owner's late write is refused by PostgreSQL too, whatever order writes arrive
// in.
//
// The schema is versioned and embedded: Open applies the migrations that are missing, under
// an advisory lock, so consumers starting together apply each migration once.
package postgres
