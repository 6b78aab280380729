package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// hookPack subscribes to every lead created, at url.
func hookPack(url string) string {
	return fmt.Sprintf(`pack: hooks
webhooks:
  - name: new-leads
    url: %s
    events: [leads.created]
`, url)
}

// TestWebhooksSurviveACrash kills crmd (SIGKILL) while events it committed
// are undelivered, the receiver refusing them, and starts it again with the
// receiver accepting: every event is delivered, none lost.
func TestWebhooksSurviveACrash(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)

		var accept atomic.Bool
		var mu sync.Mutex
		got := map[string]bool{} // record ids delivered
		arrived := make(chan struct{}, 1000)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if !accept.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			var ev struct{ Data struct{ ID string } }
			if json.Unmarshal(body, &ev) != nil || ev.Data.ID == "" {
				t.Errorf("a delivery that is not an event: %s", body)
			}
			mu.Lock()
			got[ev.Data.ID] = true
			mu.Unlock()
			arrived <- struct{}{}
		}))
		defer recv.Close()

		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "hooks.yaml"), hookPack(recv.URL))
		packCmd(t, "apply", dsn, "Acme", dir)

		s := startServer(t, dsn, "--webhook-allow", "127.0.0.0/8", "--webhook-lease", "2s")
		const n = 20
		want := map[string]bool{}
		for i := range n {
			r := s.mustSend(t, 201, "POST", "/api/v1/leads", h, fmt.Sprintf(`{"first_name":"Lead %d"}`, i))
			var rec struct{ ID string }
			json.Unmarshal(r.body, &rec)
			want[rec.ID] = true
		}
		s.kill(t)

		accept.Store(true)
		s = startServer(t, dsn, "--webhook-allow", "127.0.0.0/8", "--webhook-lease", "2s")
		deadline := time.After(60 * time.Second) // a guard: leases of the killed process end in 2 s, the second attempt is 5 s away
		for {
			mu.Lock()
			done := len(got) >= len(want)
			mu.Unlock()
			if done {
				break
			}
			select {
			case <-arrived:
			case <-deadline:
				mu.Lock()
				t.Fatalf("%d of %d events delivered after the restart", len(got), len(want))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id := range want {
			if !got[id] {
				t.Errorf("the event of lead %s was lost", id)
			}
		}
		s.stop(t)
	})
}
