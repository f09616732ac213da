// Package redisclidemo holds the test of enqueue.sh, a producer written with plain redis-cli
// that enqueues a task and waits for its terminal event.
package redisclidemo
