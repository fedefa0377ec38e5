// Package engine runs the checks of the configured provider entries: it
// loads them (Entries, Engine.Load: a reload keeps what did not change),
// checks every selected target concurrently under each scrape's budget,
// shares one live check per target between callers, reuses verdicts
// within min_interval and during a checker's backoff, abandons checks
// that overran their deadline, recovers a checker's panics, keeps each
// target's check log, transitions and last verdict for the status page,
// and hands the results to the exposition (NewExposition).
package engine
