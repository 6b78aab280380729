package delivery

import (
	"math/rand/v2"
	"time"
)

// Schedule is when each attempt of a delivery is made, after the one
// before: at once, then about 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h.
var Schedule = []time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// maxRetryAfter caps how long a receiver's Retry-After may push an attempt.
const maxRetryAfter = 24 * time.Hour

// NextAttempt returns when to make the next attempt after made attempts,
// with ±10% jitter and no sooner than retryAfter asks; false when the
// schedule is done.
func NextAttempt(made int, now time.Time, retryAfter time.Duration) (time.Time, bool) {
	if made < 1 || made >= len(Schedule) {
		return time.Time{}, false
	}
	d := Schedule[made]
	d += time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	d = max(d, min(retryAfter, maxRetryAfter))
	return now.Add(d), true
}
