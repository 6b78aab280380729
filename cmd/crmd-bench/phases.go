package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// phaseNames are the phases crmd-bench runs, in their default order.
var phaseNames = []string{"create", "get", "update", "list", "deep-list"}

// extraPhases run only when asked for.
var extraPhases = []string{"inbound", "deliveries"}

const (
	// pageSize is the page size of the list and deep-list phases.
	pageSize = 100
	// collectPageSize and collectMax bound the listing that finds ids to
	// get and update when the run created none.
	collectPageSize = 500
	collectMax      = 10000
	// requestTimeout bounds every request, so that a stuck server ends the
	// bench with errors rather than hanging it.
	requestTimeout = 30 * time.Second
	// errorsShown is how many distinct errors of each phase go to stderr.
	errorsShown = 5
	// progressEvery is how often the top-up reports its progress.
	progressEvery = 5 * time.Second
)

// Values the create and update phases cycle through.
var (
	firstNames = []string{"Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken"}
	lastNames  = []string{"Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"}
	titles     = []string{"Engineer", "Manager", "Director", "Analyst", "Founder"}
	statuses   = []string{"new", "contacted", "qualified", "customer", "lost"}
	sources    = []string{"web", "referral", "event", "import"}
	cities     = []string{"London", "Paris", "Berlin", "Lisbon", "Oslo", "Rome"}
)

// result is the outcome of one timed phase.
type result struct {
	Phase     string
	Requests  int
	Errors    int
	PerSecond float64
	P50       time.Duration
	P99       time.Duration
	Max       time.Duration
	Webhooks  deliveries // with --receiver
}

// A request is one API call, with the check its 2xx answer must pass beyond
// being JSON.
type request struct {
	method  string
	target  string // the path and query
	body    []byte
	records bool // the answer's record ids are wanted
	check   func(answer) error
}

// answer holds the parts of a response body that crmd-bench looks at.
type answer struct {
	ID      string `json:"id"`
	Count   *int   `json:"count"`
	Records []struct {
		ID string `json:"id"`
	} `json:"records"`
}

// statusError is an answer outside the 2xx class.
type statusError struct {
	status int
	body   []byte
}

func (e *statusError) Error() string {
	body := bytes.TrimSpace(e.body)
	if len(body) > 300 {
		body = append(body[:300:300], "..."...)
	}
	return fmt.Sprintf("status %d: %s", e.status, body)
}

// bench holds what the phases of one run share.
type bench struct {
	cfg   config
	setup *client // the connection of the untimed requests
	base  string  // path of the object's records
	log   io.Writer
	errs  errorLog
	runID string        // makes the emails of this run unique
	seq   atomic.Uint64 // numbers the records this run creates

	recv *receiver // with --receiver

	mu  sync.Mutex
	ids []string // records to get and update
}

// newBench returns a bench for cfg, or an error when cfg.url is not one
// it can drive.
func newBench(cfg config, log io.Writer) (*bench, error) {
	setup, err := newClient(cfg.url, cfg.key)
	if err != nil {
		return nil, err
	}
	return &bench{
		cfg:   cfg,
		setup: setup,
		base:  "/api/v1/" + url.PathEscape(cfg.object),
		log:   log,
		errs:  errorLog{w: log, seen: map[string]bool{}, shown: map[string]int{}},
		runID: strconv.FormatInt(time.Now().UnixNano(), 36),
	}, nil
}

// runPhases checks that the server answers and then runs the configured
// phases in order. It returns the results of the phases that ran, and an
// error when one of them could not be prepared.
func (b *bench) runPhases(ctx context.Context) ([]result, error) {
	if _, err := b.setup.do(b.listRequest(0, 1)); err != nil {
		return nil, fmt.Errorf("checking the server: %w", err)
	}
	var results []result
	for _, name := range b.cfg.phases {
		if name == "deliveries" {
			results = append(results, b.deliveries(ctx))
			continue
		}
		next, err := b.prepare(ctx, name)
		if err != nil {
			return results, fmt.Errorf("preparing %s: %w", name, err)
		}
		fmt.Fprintf(b.log, "crmd-bench: %s: running for %s\n", name, b.cfg.duration)
		if b.recv != nil {
			b.recv.reset()
		}
		start := time.Now()
		r := b.timed(ctx, name, next)
		fmt.Fprintf(b.log, "crmd-bench: %s: %d requests, %d errors\n", name, r.Requests, r.Errors)
		if b.recv != nil {
			b.recv.settle(b.cfg.settle)
			r.Webhooks = b.recv.summary(start)
			if r.Webhooks.Bad > 0 {
				fmt.Fprintf(b.log, "crmd-bench: %s: %d deliveries were not events\n", name, r.Webhooks.Bad)
				r.Errors += r.Webhooks.Bad
			}
		}
		results = append(results, r)
	}
	return results, nil
}

// deliveries is the phase that sends nothing and receives a stream of
// deliveries, such as a backlog that goes out when a disabled webhook is
// enabled: it waits for the first, then takes deliveries until none has
// arrived for --settle, and reports their rate from the first to the last.
func (b *bench) deliveries(ctx context.Context) result {
	fmt.Fprintf(b.log, "crmd-bench: deliveries: waiting for the first\n")
	b.recv.reset()
	var first time.Time
	select {
	case <-b.recv.arrived:
		first = time.Now()
	case <-ctx.Done():
		return result{Phase: "deliveries"}
	}
	b.recv.settle(b.cfg.settle)
	r := result{Phase: "deliveries", Webhooks: b.recv.summary(first)}
	r.Errors = r.Webhooks.Bad
	fmt.Fprintf(b.log, "crmd-bench: deliveries: %d\n", r.Webhooks.Count)
	return r
}

// prepare does the untimed work a phase needs and returns the function
// that makes its requests.
func (b *bench) prepare(ctx context.Context, phase string) (func() request, error) {
	switch phase {
	case "create":
		return b.createRequest, nil
	case "get":
		ids, err := b.recordIDs(ctx)
		if err != nil {
			return nil, err
		}
		return func() request { return request{method: http.MethodGet, target: b.recordURL(ids)} }, nil
	case "update":
		ids, err := b.recordIDs(ctx)
		if err != nil {
			return nil, err
		}
		return func() request {
			body := []byte(`{"status":"` + statuses[rand.IntN(len(statuses))] + `"}`)
			return request{method: http.MethodPatch, target: b.recordURL(ids), body: body}
		}, nil
	case "list":
		return func() request { return b.listRequest(0, pageSize) }, nil
	case "inbound":
		return b.inboundRequest, nil
	case "deep-list":
		if err := b.topUp(ctx); err != nil {
			return nil, err
		}
		return func() request {
			r := b.listRequest(b.cfg.deepOffset, pageSize)
			r.check = wantCount(pageSize)
			return r
		}, nil
	}
	return nil, fmt.Errorf("unknown phase %q", phase)
}

// createRequest returns a request creating a contact with a unique email;
// its check keeps the new record's id.
func (b *bench) createRequest() request {
	n := int(b.seq.Add(1))
	body, _ := json.Marshal(map[string]string{ // a map of strings always encodes
		"first_name": firstNames[n%len(firstNames)],
		"last_name":  lastNames[n/len(firstNames)%len(lastNames)],
		"email":      fmt.Sprintf("bench.%s.%d@example.com", b.runID, n),
		"phone":      fmt.Sprintf("+44 20 7946 %04d", n%10000),
		"title":      titles[n%len(titles)],
		"status":     statuses[n%len(statuses)],
		"source":     sources[n%len(sources)],
		"city":       cities[n%len(cities)],
	})
	return request{method: http.MethodPost, target: b.base, body: body, check: func(a answer) error {
		if a.ID == "" {
			return errors.New("the created record has no id")
		}
		b.addIDs(a.ID)
		return nil
	}}
}

// inboundRequest returns a request posting a website's contact form, with a
// unique email, to the inbound webhook.
func (b *bench) inboundRequest() request {
	n := int(b.seq.Add(1))
	body, _ := json.Marshal(map[string]any{ // strings and a map of them always encode
		"name":    firstNames[n%len(firstNames)] + " " + lastNames[n/len(firstNames)%len(lastNames)],
		"email":   fmt.Sprintf("form.%s.%d@example.com", b.runID, n),
		"phone":   fmt.Sprintf("+44 20 7946 %04d", n%10000),
		"message": "Please call me about a quote.",
		"company": map[string]string{"name": cities[n%len(cities)] + " Plumbing"},
	})
	return request{method: http.MethodPost, target: b.cfg.inbound, body: body, check: func(a answer) error {
		if a.ID == "" {
			return errors.New("the inbound answer has no id")
		}
		return nil
	}}
}

// listRequest returns a request for the page of limit records at offset.
func (b *bench) listRequest(offset, limit int) request {
	return request{method: http.MethodGet, target: b.base + "?limit=" + strconv.Itoa(limit) + "&offset=" + strconv.Itoa(offset)}
}

// recordURL returns the URL of a record picked at random among ids.
func (b *bench) recordURL(ids []string) string {
	return b.base + "/" + url.PathEscape(ids[rand.IntN(len(ids))])
}

// wantCount returns a check that a list answer holds n records.
func wantCount(n int) func(answer) error {
	return func(a answer) error {
		if a.Count == nil {
			return errors.New("the list answer has no count")
		}
		if *a.Count != n {
			return fmt.Errorf("the list answer has count %d, want %d", *a.Count, n)
		}
		return nil
	}
}

// addIDs adds ids to the records the get and update phases use.
func (b *bench) addIDs(ids ...string) {
	b.mu.Lock()
	b.ids = append(b.ids, ids...)
	b.mu.Unlock()
}

// recordIDs returns the ids of the records this run created, or when it
// created none, the ids of up to collectMax records found by listing.
func (b *bench) recordIDs(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	ids := slices.Clip(b.ids)
	b.mu.Unlock()
	if len(ids) > 0 {
		return ids, nil
	}
	fmt.Fprintf(b.log, "crmd-bench: listing up to %d %s to use their ids\n", collectMax, b.cfg.object)
	for offset := 0; offset < collectMax; offset += collectPageSize {
		req := b.listRequest(offset, collectPageSize)
		req.records = true
		a, err := b.setup.do(req)
		if err != nil {
			return nil, fmt.Errorf("listing records: %w", err)
		}
		for _, r := range a.Records {
			ids = append(ids, r.ID)
		}
		if len(a.Records) < collectPageSize {
			break
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("there are no %s: run the create phase first", b.cfg.object)
	}
	b.addIDs(ids...)
	return ids, nil
}

// topUp creates records, untimed, until the object holds --records of them
// and at least a full page at --deep-offset.
func (b *bench) topUp(ctx context.Context) error {
	want := max(b.cfg.records, b.cfg.deepOffset+pageSize)
	full, err := b.hasRecordAt(ctx, want-1)
	if err != nil {
		return fmt.Errorf("counting records: %w", err)
	}
	if full {
		fmt.Fprintf(b.log, "crmd-bench: %s holds at least %d records\n", b.cfg.object, want)
		return nil
	}
	have, err := b.count(ctx)
	if err != nil {
		return fmt.Errorf("counting records: %w", err)
	}
	missing := want - have
	fmt.Fprintf(b.log, "crmd-bench: %s holds %d records; creating %d more, untimed\n", b.cfg.object, have, missing)
	var left atomic.Int64
	left.Store(int64(missing))
	stop := b.reportProgress(&left, missing)
	start := time.Now()
	_, errs := b.loop(ctx, "top-up", b.createRequest, func() bool { return left.Add(-1) >= 0 })
	stop()
	elapsed := time.Since(start)
	fmt.Fprintf(b.log, "crmd-bench: sent %d creates in %s (%.0f/s)\n", missing, elapsed.Round(time.Millisecond), float64(missing)/elapsed.Seconds())
	if errs > 0 {
		return fmt.Errorf("%d of %d creates failed", errs, missing)
	}
	return nil
}

// reportProgress prints how many of total creates are done every
// progressEvery, until the function it returns is called.
func (b *bench) reportProgress(left *atomic.Int64, total int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(b.log, "crmd-bench: created %d of %d\n", total-int(max(left.Load(), 0)), total)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// count returns how many records the object holds, found by doubling and
// then bisecting the offset of one-record pages.
func (b *bench) count(ctx context.Context) (int, error) {
	// Every offset below lo holds a record; offset hi holds none.
	lo, hi := 0, 1
	for {
		ok, err := b.hasRecordAt(ctx, hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi+1, hi*2
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := b.hasRecordAt(ctx, mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// hasRecordAt reports whether the object holds a record at offset.
func (b *bench) hasRecordAt(ctx context.Context, offset int) (bool, error) {
	req := b.listRequest(offset, 1)
	req.records = true
	a, err := b.setup.do(req)
	if err != nil {
		return false, err
	}
	return len(a.Records) > 0, nil
}

// timed runs one phase for the configured duration and summarizes it.
func (b *bench) timed(ctx context.Context, phase string, next func() request) result {
	start := time.Now()
	deadline := start.Add(b.cfg.duration)
	lat, errs := b.loop(ctx, phase, next, func() bool { return time.Now().Before(deadline) })
	elapsed := time.Since(start)
	slices.Sort(lat)
	return result{
		Phase:     phase,
		Requests:  len(lat),
		Errors:    errs,
		PerSecond: float64(len(lat)) / elapsed.Seconds(),
		P50:       percentile(lat, 0.50),
		P99:       percentile(lat, 0.99),
		Max:       percentile(lat, 1),
	}
}

// loop runs the clients in a closed loop: each sends the request next makes,
// waits for the answer, and goes on while more reports true. It returns the
// latency of every request, failed or not, and the number that failed.
func (b *bench) loop(ctx context.Context, phase string, next func() request, more func() bool) ([]time.Duration, int) {
	lats := make([][]time.Duration, b.cfg.clients)
	errs := make([]int, b.cfg.clients)
	// With --rate, request n is sent no earlier than n/rate after the start.
	var sent atomic.Int64
	begin := time.Now()
	pace := func() {
		if b.cfg.rate > 0 {
			due := begin.Add(time.Duration(float64(sent.Add(1)-1) / b.cfg.rate * float64(time.Second)))
			time.Sleep(time.Until(due))
		}
	}
	var wg sync.WaitGroup
	for c := range b.cfg.clients {
		wg.Go(func() {
			cl := *b.setup // same server, own connection
			cl.conn = nil
			defer cl.close()
			for more() && ctx.Err() == nil {
				pace()
				req := next()
				start := time.Now()
				_, err := cl.do(req)
				lats[c] = append(lats[c], time.Since(start))
				if err != nil {
					errs[c]++
					b.errs.report(phase, err)
				}
			}
		})
	}
	wg.Wait()
	var total int
	for _, n := range errs {
		total += n
	}
	return slices.Concat(lats...), total
}

// percentile returns the nearest-rank p-th percentile of sorted, 0 < p <= 1,
// or 0 when sorted is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// errorLog writes the first few distinct errors of each phase.
type errorLog struct {
	w     io.Writer
	mu    sync.Mutex
	seen  map[string]bool // phase and message
	shown map[string]int  // errors written per phase
}

// report writes err unless it was seen before in phase or phase has had
// its share of errors written.
func (l *errorLog) report(phase string, err error) {
	msg := err.Error()
	l.mu.Lock()
	defer l.mu.Unlock()
	key := phase + "\x00" + msg
	if l.seen[key] || l.shown[phase] >= errorsShown {
		return
	}
	l.seen[key] = true
	l.shown[phase]++
	fmt.Fprintf(l.w, "crmd-bench: %s: error: %s\n", phase, msg)
}
