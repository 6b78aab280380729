package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/objects"
)

// DispatcherOptions configure the delivery of outgoing webhooks.
type DispatcherOptions struct {
	// Client sends each attempt; it holds the SSRF policy.
	Client *delivery.Client
	// Workers is how many deliveries are sent at once (default 32).
	Workers int
	// Lease is how long a claimed delivery is this process's before another
	// may take it over (default 2 minutes: longer than an attempt with its
	// quick retries).
	Lease time.Duration
	// FailingFor is how long an endpoint may fail every delivery before it
	// is disabled (default 5 days).
	FailingFor time.Duration
	// Poll is the longest the dispatcher sleeps without a wake-up (default
	// 1 s): it finds deliveries added by other processes on SQLite, and
	// leases that ended.
	Poll time.Duration
	// Drain is how long sends in flight may finish at shutdown (default
	// 5 s); the ones still running then are cancelled and, unrecorded, sent
	// again when their lease ends.
	Drain time.Duration
}

func (o *DispatcherOptions) defaults() {
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.Lease <= 0 {
		o.Lease = 2 * time.Minute
	}
	if o.FailingFor <= 0 {
		o.FailingFor = 5 * 24 * time.Hour
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Second
	}
	if o.Client == nil {
		o.Client = delivery.NewClient(&delivery.Policy{}, delivery.ClientOptions{})
	}
}

// dispatcherOwner names this process in delivery leases.
func dispatcherOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// RunDispatcher delivers outgoing webhooks until ctx ends: it claims due
// deliveries (woken when a write that adds some commits), sends each with
// the client, and records the outcome and the next attempt. Several
// processes may run it on one PostgreSQL database; leases keep each
// delivery with one of them at a time.
func (e *Engine) RunDispatcher(ctx context.Context, opts DispatcherOptions) error {
	opts.defaults()
	owner := dispatcherOwner()
	wake := e.store.DeliveryWakeups()
	// busy counts the sends in flight; a worker that finishes lowers it and
	// wakes the loop without ever blocking, so that the loop may stop
	// listening at shutdown while sends finish.
	var busy atomic.Int64
	freed := make(chan struct{}, 1)
	sends, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	// Outcomes are recorded by one goroutine, as many in one transaction as
	// have arrived meanwhile: a transaction per delivery held PostgreSQL to
	// about a thousand deliveries a second. Until recorded, a delivery stays
	// leased; one whose outcome a crash lost is sent again.
	results := make(chan objects.Attempt, opts.Workers)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		e.recordAttempts(context.WithoutCancel(ctx), results)
	}()
	var wg sync.WaitGroup
	defer func() {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(opts.Drain):
			cancelSends()
			<-done
		}
		close(results)
		<-recorded
	}()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
		// Claim as many as there are idle workers.
		if idle := opts.Workers - int(busy.Load()); idle > 0 && ctx.Err() == nil {
			ds, err := e.store.ClaimDeliveries(ctx, owner, now(), opts.Lease, idle)
			if err != nil && ctx.Err() == nil {
				e.log.LogAttrs(ctx, slog.LevelWarn, "claiming webhook deliveries", slog.String("err", err.Error()))
			}
			for _, d := range ds {
				busy.Add(1)
				wg.Go(func() {
					if a, ok := e.attempt(sends, owner, d, &opts); ok {
						results <- a
					}
					busy.Add(-1)
					select {
					case freed <- struct{}{}:
					default:
					}
				})
			}
			if len(ds) >= idle {
				continue // there may be more due
			}
		}
		// With every worker busy, only a worker finishing makes claiming
		// worth it; otherwise sleep until the next delivery is due, a write
		// adds some, or the poll interval ends.
		var timer *time.Timer
		var due <-chan time.Time // nil: never
		if busy.Load() < int64(opts.Workers) {
			wait := opts.Poll
			if next, ok, err := e.store.NextDeliveryAt(ctx); err == nil && ok {
				wait = min(wait, max(0, time.Until(next)))
			}
			timer = time.NewTimer(wait)
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-freed:
		case <-due:
		case <-prune.C:
			if err := e.store.PruneInboundAnswers(ctx, now().Add(-InboundIdempotency)); err != nil {
				e.log.LogAttrs(ctx, slog.LevelWarn, "forgetting old inbound answers", slog.String("err", err.Error()))
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// attempt sends a delivery once and returns what happened, or false when
// the send was cut short by the shutdown.
func (e *Engine) attempt(ctx context.Context, owner string, d *objects.Delivery, opts *DispatcherOptions) (objects.Attempt, bool) {
	res := opts.Client.Send(ctx, delivery.Request{URL: d.URL, Headers: d.Headers, MsgID: d.MessageID, Secret: d.Secret, Body: d.Payload})
	if ctx.Err() != nil {
		return objects.Attempt{}, false // the lease ends and the delivery is sent again
	}
	a := objects.Attempt{BusinessID: d.BusinessID, Endpoint: d.Endpoint, DeliveryID: d.ID, Owner: owner, At: now(), OK: res.OK(),
		Status: res.Status, Error: res.Err, Response: res.Body, FailingFor: opts.FailingFor}
	if a.Response == nil {
		a.Response = []byte{} // no response: an empty body, not NULL
	}
	if !a.OK {
		switch next, ok := delivery.NextAttempt(d.Attempts+1, a.At, res.RetryAfter); {
		case res.Gone():
			a.Disable = "the receiver answered 410 Gone"
		case ok:
			a.Next = next
		}
		e.log.LogAttrs(ctx, slog.LevelWarn, "webhook delivery failed", slog.String("business", d.BusinessID),
			slog.String("delivery", d.ID), slog.String("webhook", d.Endpoint), slog.Int("attempt", d.Attempts+1),
			slog.Int("status", res.Status), slog.String("err", res.Err), slog.Bool("retrying", !a.Next.IsZero()))
	}
	return a, true
}

// maxRecordBatch bounds the outcomes recorded in one transaction.
const maxRecordBatch = 256

// recordAttempts records the outcomes sent on results, in batches of those
// waiting, until results is closed.
func (e *Engine) recordAttempts(ctx context.Context, results <-chan objects.Attempt) {
	batch := make([]objects.Attempt, 0, maxRecordBatch)
	for a := range results {
		batch = append(batch[:0], a)
	more:
		for len(batch) < maxRecordBatch {
			select {
			case a, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, a)
			default:
				break more
			}
		}
		if err := e.store.RecordAttempts(ctx, batch); err != nil {
			e.log.LogAttrs(ctx, slog.LevelError, "recording webhook attempts; their deliveries are sent again when their leases end",
				slog.Int("attempts", len(batch)), slog.String("err", err.Error()))
		}
	}
}
