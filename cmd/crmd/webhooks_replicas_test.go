package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// workersPerReplica is --webhook-workers of each server in the replica
// tests: more requests than that in flight at once at the receiver can
// only come from both processes.
const workersPerReplica = 4

// gatedReceiver is a webhook receiver that holds every request until the
// gate opens, and counts the deliveries it answered 2xx by webhook-id.
type gatedReceiver struct {
	t    *testing.T
	srv  *httptest.Server
	full chan struct{} // closed when more than workersPerReplica requests wait at once
	open chan struct{} // closed to let the waiting requests (and all later ones) through

	mu       sync.Mutex
	waiting  int
	answered map[string]int  // webhook-id → how many times it was answered 2xx
	aborted  map[string]bool // webhook-ids whose sender went away while held
	changed  chan struct{}   // a request was answered or aborted
	fullOnce sync.Once
}

func newGatedReceiver(t *testing.T) *gatedReceiver {
	g := &gatedReceiver{t: t, full: make(chan struct{}), open: make(chan struct{}),
		answered: map[string]int{}, aborted: map[string]bool{}, changed: make(chan struct{}, 1)}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gatedReceiver) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	id := r.Header.Get("webhook-id")
	if id == "" {
		g.t.Errorf("a delivery without webhook-id")
	}
	g.mu.Lock()
	g.waiting++
	if g.waiting > workersPerReplica {
		g.fullOnce.Do(func() { close(g.full) })
	}
	g.mu.Unlock()
	defer g.notify()
	select {
	case <-g.open:
	case <-r.Context().Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
	if r.Context().Err() != nil { // the sender hung up: it never saw an answer
		g.aborted[id] = true
		return
	}
	g.answered[id]++
	w.WriteHeader(http.StatusNoContent)
}

func (g *gatedReceiver) notify() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// waitFull waits until more requests wait at the receiver than one process
// sends at once: both processes are sending.
func (g *gatedReceiver) waitFull(t *testing.T) {
	t.Helper()
	select {
	case <-g.full:
	case <-time.After(processTimeout): // a guard against hangs
		t.Fatalf("never more than %d requests at once: one process sends everything", workersPerReplica)
	}
}

// waitAnswered waits until every id in want has been answered.
func (g *gatedReceiver) waitAnswered(t *testing.T, want map[string]bool) {
	t.Helper()
	deadline := time.After(processTimeout) // a guard against hangs, not a speed check
	for {
		g.mu.Lock()
		missing := 0
		for id := range want {
			if g.answered[id] == 0 {
				missing++
			}
		}
		g.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-g.changed:
		case <-deadline:
			t.Fatalf("%d of %d deliveries never answered", missing, len(want))
		}
	}
}

// replicaSetup starts two crmd processes on one new PostgreSQL database
// with a subscription to every created lead at the receiver, writes n leads
// alternately through both, and returns the servers and the webhook-ids of
// the deliveries queued for them (from crmd webhook deliveries).
func replicaSetup(t *testing.T, g *gatedReceiver, n int, lease string) (dsn string, servers []*server, want map[string]bool) {
	t.Helper()
	dsn = storetest.DSN(t, "postgres")
	key, _ := newBusiness(t, dsn, "Acme")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "hooks.yaml"), hookPack(g.srv.URL))
	packCmd(t, "apply", dsn, "Acme", dir)

	flags := []string{"--webhook-allow", "127.0.0.0/8", "--webhook-lease", lease, "--webhook-workers", strconv.Itoa(workersPerReplica)}
	servers = []*server{spawnServer(t, dsn, flags...), spawnServer(t, dsn, flags...)}
	for _, s := range servers {
		s.waitListening(t)
	}
	for i := range n {
		servers[i%2].mustSend(t, http.StatusCreated, "POST", "/api/v1/leads", bearer(key), fmt.Sprintf(`{"first_name":"Lead %d"}`, i))
	}
	want = map[string]bool{}
	for _, d := range deliveries(t, dsn, n) {
		want["msg_"+d.ID] = true
	}
	if len(want) != n {
		t.Fatalf("%d deliveries queued for %d leads", len(want), n)
	}
	return dsn, servers, want
}

type deliveryRow struct {
	ID       string
	Status   string
	Attempts int
}

func deliveries(t *testing.T, dsn string, limit int) []deliveryRow {
	t.Helper()
	var rows []deliveryRow
	out := crmdOK(t, "webhook", "deliveries", "--business", "Acme", "--db", dsn, "--json", "--limit", strconv.Itoa(limit+1))
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("crmd webhook deliveries --json: %v\n%s", err, out)
	}
	return rows
}

// TestWebhooksTwoReplicas runs two crmd processes on one PostgreSQL
// database, writing through both, and delivering one stream of events
// together: the receiver holds requests until more are waiting than one
// process sends at once, so both are sending; every event is delivered
// exactly once (a lease held by two processes would send one twice), and
// every delivery is recorded as succeeded at its first attempt.
func TestWebhooksTwoReplicas(t *testing.T) {
	t.Parallel()
	g := newGatedReceiver(t)
	const n = 60
	dsn, servers, want := replicaSetup(t, g, n, "2m")
	g.waitFull(t)
	close(g.open)
	g.waitAnswered(t, want)
	for _, s := range servers {
		s.stop(t)
	}

	g.mu.Lock()
	for id, times := range g.answered {
		switch {
		case !want[id]:
			t.Errorf("delivery %s was not queued", id)
		case times != 1:
			t.Errorf("delivery %s was answered %d times, want once", id, times)
		}
	}
	if len(g.aborted) != 0 {
		t.Errorf("%d requests abandoned with no crash", len(g.aborted))
	}
	g.mu.Unlock()
	for _, d := range deliveries(t, dsn, n) {
		if d.Status != "succeeded" || d.Attempts != 1 {
			t.Errorf("delivery %s: %s after %d attempts, want succeeded after 1", d.ID, d.Status, d.Attempts)
		}
	}
}

// TestWebhooksLeaseTakenOver kills one of two crmd processes (SIGKILL)
// while deliveries it leased wait at the receiver: the other process takes
// them over when their lease ends and every event is delivered.
func TestWebhooksLeaseTakenOver(t *testing.T) {
	t.Parallel()
	g := newGatedReceiver(t)
	const n = 30
	dsn, servers, want := replicaSetup(t, g, n, "2s")
	g.waitFull(t)
	servers[0].kill(t)
	// The killed process's requests are abandoned; wait until they are, so
	// that opening the gate cannot answer them.
	deadline := time.After(processTimeout)
	for {
		g.mu.Lock()
		abandoned := len(g.aborted)
		g.mu.Unlock()
		if abandoned > 0 {
			break
		}
		select {
		case <-g.changed:
		case <-deadline:
			t.Fatal("the killed process's requests were never abandoned")
		}
	}
	close(g.open)
	g.waitAnswered(t, want)
	// A request the receiver answered just as its sender died is sent again
	// by the survivor too; the stream is done when every delivery is.
	for deadline := time.Now().Add(processTimeout); ; time.Sleep(100 * time.Millisecond) {
		done := true
		for _, d := range deliveries(t, dsn, n) {
			done = done && d.Status == "succeeded"
		}
		if done || time.Now().After(deadline) {
			break
		}
	}
	servers[1].stop(t)

	g.mu.Lock()
	for id := range g.aborted {
		if g.answered[id] == 0 {
			t.Errorf("delivery %s, in flight when its process died, was never sent again", id)
		}
	}
	g.mu.Unlock()
	for _, d := range deliveries(t, dsn, n) {
		if d.Status != "succeeded" {
			t.Errorf("delivery %s: %s after %d attempts, want succeeded", d.ID, d.Status, d.Attempts)
		}
	}
}
