package webhook

import (
	"math/rand/v2"
	"time"
)

// Schedule is the delay before each attempt of a delivery, the first
// immediate: about a day and a half from the first attempt to the eighth
// and last, spread so that a receiver that is down for minutes or for a
// night still gets its messages. It follows the example schedule of the
// Standard Webhooks spec, cut at 8 attempts.
var Schedule = []time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// MaxRetryAfter caps the delay a receiver's Retry-After can ask for: past
// it, a receiver that asks to wait longer still gets the next attempt.
const MaxRetryAfter = 24 * time.Hour

// jitter is the fraction by which a delay of Schedule is moved, either
// way, so that deliveries that failed together (a receiver that was down)
// do not all come back at the same moment.
const jitter = 0.10

// NextAttempt returns when to make the next attempt of a delivery after
// made attempts (the first counts), failed at now: Schedule[made] later,
// give or take 10%, and no sooner than the receiver's Retry-After (capped
// at MaxRetryAfter). It returns false when all len(Schedule) attempts have
// been made.
func NextAttempt(made int, now time.Time, retryAfter time.Duration) (time.Time, bool) {
	made = max(made, 0)
	if made >= len(Schedule) {
		return time.Time{}, false
	}
	delay := jittered(Schedule[made])
	delay = max(delay, min(retryAfter, MaxRetryAfter))
	return now.Add(delay), true
}

// jittered returns d moved by a random amount of at most jitter·d.
func jittered(d time.Duration) time.Duration {
	spread := time.Duration(float64(d) * jitter)
	if spread <= 0 {
		return d
	}
	return d - spread + rand.N(2*spread+1)
}
