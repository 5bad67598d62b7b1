package scenario

import "time"

// SetDenyWait shortens how long p2p-policies waits for the policies to stop its outsider, for
// tests of a cluster that never enforces them; it returns a function restoring the defaults.
func SetDenyWait(wait, retry time.Duration) (restore func()) {
	w, r := denyWait, denyRetry
	denyWait, denyRetry = wait, retry
	return func() { denyWait, denyRetry = w, r }
}
