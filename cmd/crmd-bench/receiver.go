package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// A receiver is a webhook receiver crmd-bench runs beside the load, for a
// subscription to point at. It answers every POST 204 and keeps, per
// delivery, how long after its event it arrived: the payload's occurred_at
// is stamped in the write's transaction, shortly before the commit, so
// this is an upper bound of the time from commit to first attempt.
type receiver struct {
	srv *http.Server

	mu      sync.Mutex
	lags    []time.Duration // arrival − occurred_at, of each delivery since reset
	last    time.Time       // the latest arrival
	bad     int             // deliveries whose body is not an event
	arrived chan struct{}   // a delivery arrived (never blocks)
}

// startReceiver listens on addr and serves until close.
func startReceiver(addr string) (*receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--receiver: %w", err)
	}
	r := &receiver{arrived: make(chan struct{}, 1)}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *receiver) close() { r.srv.Close() }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(req.Body)
	var ev struct {
		OccurredAt time.Time `json:"occurred_at"`
	}
	ok := json.NewDecoder(bytes.NewReader(body)).Decode(&ev) == nil && !ev.OccurredAt.IsZero()
	r.mu.Lock()
	if ok {
		r.lags = append(r.lags, now.Sub(ev.OccurredAt))
	} else {
		r.bad++
	}
	r.last = now
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// reset forgets the deliveries so far, before a phase.
func (r *receiver) reset() {
	r.mu.Lock()
	r.lags, r.bad, r.last = nil, 0, time.Time{}
	r.mu.Unlock()
	select {
	case <-r.arrived: // of an earlier phase
	default:
	}
}

// settle waits until no delivery has arrived for quiet: the stream the
// phase's writes started has been delivered.
func (r *receiver) settle(quiet time.Duration) {
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-r.arrived:
			t.Reset(quiet)
		case <-t.C:
			return
		}
	}
}

// deliveries are what the receiver saw of one phase.
type deliveries struct {
	Count     int
	Bad       int
	PerSecond float64 // from the phase's start to the last arrival
	LagP50    time.Duration
	LagP99    time.Duration
	LagMax    time.Duration
}

// summary summarizes the deliveries since reset, of a phase that started
// at start.
func (r *receiver) summary(start time.Time) deliveries {
	r.mu.Lock()
	defer r.mu.Unlock()
	lags := slices.Clone(r.lags)
	slices.Sort(lags)
	d := deliveries{Count: len(lags), Bad: r.bad, LagP50: percentile(lags, 0.50), LagP99: percentile(lags, 0.99), LagMax: percentile(lags, 1)}
	if span := r.last.Sub(start); len(lags) > 0 && span > 0 {
		d.PerSecond = float64(len(lags)) / span.Seconds()
	}
	return d
}
