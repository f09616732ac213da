// Package postgres is the archive's PostgreSQL archive.Store. It keeps one row per request
// key with its status, result or error, owner token and times, for a per-stage retention.
//
// Every row belongs to the deployment named by Config.Deployment. A consumer uses its key
// prefix unless told otherwise. A Store reads and writes only its own deployment's rows, so
// deployments that share a database, such as two tenants' fleets or staging and
// production, never answer each other's keys.
//
// Writes are fenced in SQL: only an outcome with a larger owner token replaces a row. So
// PostgreSQL refuses a zombie owner's late write too, whatever order writes arrive in.
//
// The schema is versioned and embedded. Open applies the missing migrations under an
// advisory lock, so consumers starting together apply each migration once.
package postgres
