// Package sandbox owns every Docker call: the client behind a small interface,
// the container lifecycle of one evaluation, the pool of workers, timeouts, log
// streaming, labels and the reaper, and image preparation. It knows nothing of
// rewards or models.
package sandbox
