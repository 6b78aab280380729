package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// loadWorkers is how many clients create contacts at once.
const loadWorkers = 16

// A load is several clients creating contacts on a server as fast as it
// answers, each until it is told to stop or its request fails in transport
// (as every request does once the server is gone).
type load struct {
	srv *server
	key string
	// strict makes an answer whose body is cut off a problem: a draining
	// server finishes every answer it starts.
	strict bool

	stop     chan struct{}
	reached  chan struct{} // closed once target contacts are created
	finished chan struct{} // closed once every client has returned
	target   int
	// signaled is set when the server is sent a signal; answers after it
	// are counted, for the log only.
	signaled atomic.Bool

	mu          sync.Mutex
	created     map[string]string // id → first_name sent, for every 201
	afterSignal int
	problems    []string // wrong answers
	errs        []error  // transport errors, the last of each client
}

func startLoad(s *server, key string, target int, strict bool) *load {
	l := &load{
		srv: s, key: key, strict: strict, target: target,
		stop: make(chan struct{}), reached: make(chan struct{}), finished: make(chan struct{}),
		created: map[string]string{},
	}
	var wg sync.WaitGroup
	for w := range loadWorkers {
		wg.Go(func() { l.client(w) })
	}
	go func() {
		wg.Wait()
		close(l.finished)
	}()
	return l
}

func (l *load) client(w int) {
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		name := fmt.Sprintf("w%02d-%06d", w, i)
		body := fmt.Sprintf(`{"first_name":%q,"last_name":"Load","email":"%s@example.com"}`, name, name)
		r, err := l.srv.send("POST", "/api/v1/contacts", bearer(l.key), body)
		if err != nil {
			var be *bodyError
			l.mu.Lock()
			if l.strict && errors.As(err, &be) {
				l.problems = append(l.problems, fmt.Sprintf("POST %s: the answer was cut off: %v", body, err))
			}
			l.errs = append(l.errs, err)
			l.mu.Unlock()
			return
		}
		if !l.record(name, body, r) {
			return
		}
	}
}

// record notes one answer; it reports whether the client should go on.
func (l *load) record(name, body string, r *response) bool {
	var rec struct {
		ID        string `json:"id"`
		FirstName string `json:"first_name"`
		Email     string `json:"email"`
		CreatedAt string `json:"created_at"`
	}
	problem := ""
	switch {
	case r.status != http.StatusCreated:
		problem = fmt.Sprintf("POST %s: got %v, want 201", body, r)
	case json.Unmarshal(r.body, &rec) != nil:
		problem = fmt.Sprintf("POST %s: 201 with a body that is not a whole JSON record: %q", body, r.body)
	case !idPattern.MatchString(rec.ID) || rec.FirstName != name || rec.Email != name+"@example.com" || rec.CreatedAt == "":
		problem = fmt.Sprintf("POST %s: 201 with an incomplete record: %s", body, r.body)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if problem != "" {
		l.problems = append(l.problems, problem)
		return false
	}
	l.created[rec.ID] = name
	if l.signaled.Load() {
		l.afterSignal++
	}
	if len(l.created) == l.target {
		close(l.reached)
	}
	return true
}

// waitFor waits until the clients have created the target number of
// contacts.
func (l *load) waitFor(t *testing.T) {
	t.Helper()
	select {
	case <-l.reached:
	case <-l.finished:
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("the clients stopped after %d of %d creates; problems %q; errors %v", len(l.created), l.target, l.problems, l.errs)
	case <-time.After(processTimeout):
		t.Fatalf("fewer than %d creates answered within %v", l.target, processTimeout)
	}
}

// finish stops the clients and returns the contacts answered 201. It fails
// the test for every wrong answer.
func (l *load) finish(t *testing.T) map[string]string {
	t.Helper()
	close(l.stop)
	select {
	case <-l.finished:
	case <-time.After(processTimeout):
		t.Fatalf("the clients did not stop within %v", processTimeout)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range l.problems {
		if i == 10 {
			t.Errorf("… and %d more problems", len(l.problems)-i)
			break
		}
		t.Error(p)
	}
	t.Logf("%d creates answered 201, %d of them after the signal; %d clients ended with a transport error", len(l.created), l.afterSignal, len(l.errs))
	return l.created
}

// findAll checks that every contact in created can be read back with key.
func findAll(t *testing.T, s *server, key string, created map[string]string) {
	t.Helper()
	ids := make(chan string)
	var (
		mu      sync.Mutex
		missing []string
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				r, err := s.send("GET", "/api/v1/contacts/"+id, bearer(key), "")
				var rec struct {
					FirstName string `json:"first_name"`
				}
				var problem string
				switch {
				case err != nil:
					problem = fmt.Sprintf("GET %s: %v", id, err)
				case r.status != http.StatusOK:
					problem = fmt.Sprintf("GET %s: %v", id, r)
				case json.Unmarshal(r.body, &rec) != nil || rec.FirstName != created[id]:
					problem = fmt.Sprintf("GET %s: want first_name %q, got %s", id, created[id], r.body)
				}
				if problem != "" {
					mu.Lock()
					missing = append(missing, problem)
					mu.Unlock()
				}
			}
		})
	}
	for id := range created {
		ids <- id
	}
	close(ids)
	wg.Wait()
	if len(missing) > 0 {
		t.Errorf("%d of %d contacts answered 201 are not found after the restart; the first ones:", len(missing), len(created))
		for _, m := range missing[:min(10, len(missing))] {
			t.Error(m)
		}
	}
}

// storedIDs lists every contact of key's business, page by page.
func storedIDs(t *testing.T, s *server, key string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for offset := 0; ; offset += 500 {
		r := s.mustSend(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/contacts?limit=500&offset=%d", offset), bearer(key), "")
		var page struct {
			Count   int
			Records []struct{ ID string }
		}
		if err := json.Unmarshal(r.body, &page); err != nil || page.Count != len(page.Records) {
			t.Fatalf("list at offset %d: %v in %v", offset, err, r)
		}
		for _, rec := range page.Records {
			ids[rec.ID] = true
		}
		if page.Count < 500 {
			return ids
		}
	}
}

// TestDurabilityAfterSIGKILL kills the server with SIGKILL while clients
// create contacts, restarts it on the same database, and finds every
// contact that had been answered 201.
func TestDurabilityAfterSIGKILL(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		srv := startServer(t, dsn)

		l := startLoad(srv, key, 300, false)
		l.waitFor(t)
		l.signaled.Store(true)
		srv.kill(t) // creates are in flight: the clients never pause
		created := l.finish(t)

		srv = startServer(t, dsn)
		findAll(t, srv, key, created)
		// Creates committed whose answer the kill cut off are stored too.
		t.Logf("%d contacts stored", len(storedIDs(t, srv, key)))
	})
}

// TestSIGTERMDrains sends SIGTERM while clients create contacts: the server
// exits with status 0 after logging "stopped", no request gets a 5xx or a
// cut-off answer, every create answered 201 is found after a restart, and
// no create was stored without being answered.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		srv := startServer(t, dsn)

		l := startLoad(srv, key, 200, true)
		l.waitFor(t)
		l.signaled.Store(true)
		if code := srv.signal(t, syscall.SIGTERM); code != 0 {
			t.Errorf("crmd serve exited with status %d after SIGTERM, want 0", code)
		}
		if !srv.logged("stopped") {
			t.Errorf(`crmd serve did not log "stopped" after SIGTERM`)
		}
		created := l.finish(t)

		srv = startServer(t, dsn)
		findAll(t, srv, key, created)
		// A server that drains answers every request it has begun: a
		// request the clients got no answer to was never read, so it stored
		// nothing, and the contacts stored are exactly those answered 201.
		stored := storedIDs(t, srv, key)
		var unanswered []string
		for id := range stored {
			if _, ok := created[id]; !ok {
				unanswered = append(unanswered, id)
			}
		}
		if len(unanswered) > 0 {
			t.Errorf("%d contacts were stored but their create was never answered (the shutdown dropped answers): %v", len(unanswered), unanswered)
		}
	})
}
